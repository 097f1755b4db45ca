/*
 * test_toolcall.c — chat/toolcall: format detection on the real chat
 * templates (tests/fixtures/templates, the shared Qwen3 tokenizer), `tools`
 * validation errors that name the element, the streaming parser over a table
 * of outputs per format (every two-piece split, random multi-piece splits,
 * byte by byte and every truncation point must agree with the whole text,
 * and what a prefix streams must be a prefix of what the whole text gives),
 * and the call grammars (accept the canonical call texts, refuse unknown
 * tools and trailing text; lazy grammars accept the text after the trigger).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/toolcall.h"
#include "grammar/grammar.h"
#include "test.h"

#define FIX "tests/fixtures/templates/"

/* ---- detection ---- */

static char *read_text(const char *path) {
    char *s = NULL;
    size_t n;
    err_t e = {0};
    if (file_read_all(path, &s, &n, &e) != 0) return NULL;
    return s;
}

static void test_detect(void) {
    static const struct {
        const char *file;
        tc_format want;
    } cases[] = {
        {"qwen25", TC_HERMES},   {"qwen3", TC_HERMES},    {"llama31", TC_LLAMA3}, {"llama32", TC_LLAMA3},
        {"mistral-v03", TC_MISTRAL}, {"llama3", TC_GENERIC}, {"llama2", TC_GENERIC}, {"smollm2", TC_GENERIC},
        {"phi3", TC_GENERIC},    {"gemma2", TC_GENERIC},  {"gemma3", TC_GENERIC}, {"unsupported", TC_GENERIC},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s.jinja", cases[i].file);
        char *src = read_text(path);
        CHECK_MSG(src != NULL, "cannot read %s", path);
        if (!src) continue;
        tc_format f = tc_detect(src);
        CHECK_MSG(f == cases[i].want, "%s: %s, want %s", cases[i].file, tc_format_name(f),
                  tc_format_name(cases[i].want));
        free(src);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer_config.json", test_shared_dir());
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    CHECK_MSG(cfg != NULL, "%s: %s", path, je.text);
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    CHECK(tmpl != NULL);
    if (tmpl) CHECK_EQ_INT(tc_detect(tmpl), TC_HERMES);
    json_decref(cfg);
    CHECK_EQ_INT(tc_detect(NULL), TC_GENERIC);
    CHECK_EQ_INT(tc_detect(""), TC_GENERIC);
    /* llama 3.0: headers but no ipython tool role */
    CHECK_EQ_INT(tc_detect("<|start_header_id|>user<|end_header_id|>"), TC_GENERIC);
    /* gpt-oss: the lines of its template that render an assistant turn */
    CHECK_EQ_INT(tc_detect("{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content + \"<|end|>\" }}"),
                 TC_HARMONY);

    for (int f = TC_NONE; f <= TC_HARMONY; f++) {
        tc_format g = TC_NONE;
        err_t e = {0};
        CHECK_EQ_INT(tc_format_from_name(tc_format_name((tc_format)f), &g, &e), 0);
        CHECK_EQ_INT(g, f);
    }
    err_t e = {0};
    tc_format g;
    CHECK_EQ_INT(tc_format_from_name("qwen", &g, &e), ERR_INVALID);
    CHECK(strstr(e.msg, "'qwen'") && strstr(e.msg, "hermes"));
}

/* ---- tools validation ---- */

static const char *TOOLS_JSON =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather of a city\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"},"
    " \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"tz\": {\"type\": \"string\"}}, \"required\": [\"tz\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"ping\", \"strict\": true}}]";

static json_t *load(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j) fprintf(stderr, "bad test JSON: %s: %s\n", s, je.text);
    return j;
}

static void test_check_tools(void) {
    json_t *t = load(TOOLS_JSON);
    err_t e = {0};
    CHECK_EQ_INT(tc_check_tools(t, &e), 0);
    json_decref(t);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{}", "tools must be an array"},
        {"[]", "tools must not be empty"},
        {"[1]", "tools[0] must be an object"},
        {"[{\"function\": {\"name\": \"f\"}}]", "tools[0].type must be \"function\""},
        {"[{\"type\": \"tool\", \"function\": {\"name\": \"f\"}}]", "tools[0].type must be \"function\""},
        {"[{\"type\": \"function\"}]", "tools[0].function must be an object"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\"}, \"x\": 1}]", "tools[0]: unknown field 'x'"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": \"function\", \"function\": {}}]",
         "tools[1].function.name is required"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]", "tools[0].function.name must be"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"\"}}]", "tools[0].function.name must be"},
        {"[{\"type\": \"function\", \"function\": {\"name\": 3}}]", "tools[0].function.name must be"},
        {"[{\"type\": \"function\", \"function\": {\"name\": "
         "\"a2345678901234567890123456789012345678901234567890123456789012345\"}}]",
         "tools[0].function.name must be"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": 1}}]",
         "tools[0].function.description must be a string"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": 1}}]",
         "tools[0].function.strict must be a boolean"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": []}}]",
         "tools[0].function.parameters must be a JSON Schema object"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"string\"}}}]",
         "tools[0].function.parameters.type must be \"object\""},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"extra\": 1}}]",
         "tools[0].function: unknown field 'extra'"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": \"function\", \"function\": "
         "{\"name\": \"g\"}}, {\"type\": \"function\", \"function\": {\"name\": \"f\"}}]",
         "tools[2].function.name 'f' repeats tools[0]'s"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        json_t *j = load(bad[i].json);
        err_t e2 = {0};
        CHECK_EQ_INT(tc_check_tools(j, &e2), ERR_INVALID);
        err_untag(&e2); /* its field paths are tagged for the server's APIs (base.h) */
        CHECK_MSG(strstr(e2.msg, bad[i].msg) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, e2.msg, bad[i].msg);
        json_decref(j);
    }
    err_t e3 = {0};
    CHECK_EQ_INT(tc_check_tools(NULL, &e3), ERR_INVALID);
    /* too many */
    json_t *many = json_array();
    for (int i = 0; i <= TC_MAX_TOOLS; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "f%d", i);
        json_array_append_new(many, json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", nm));
    }
    CHECK_EQ_INT(tc_check_tools(many, &e3), ERR_INVALID);
    json_array_remove(many, 0);
    CHECK_EQ_INT(tc_check_tools(many, &e3), 0);
    json_decref(many);

    /* the generic system prompt lists the tools and the syntax */
    t = load(TOOLS_JSON);
    char *sys = tc_generic_system_prompt(t);
    CHECK(strstr(sys, "\"name\": \"get_weather\"") && strstr(sys, "\"name\": \"ping\""));
    CHECK(strstr(sys, "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}]}"));
    free(sys);
    json_decref(t);
}

/* ---- the parser ---- */

typedef struct want_call {
    const char *name, *args;
} want_call;

typedef struct pcase {
    tc_format f;
    bool tools_on, reasoning, think_open;
    const char *text;
    const char *content, *reasoning_text;
    int n_calls;        /* complete calls */
    want_call calls[3];
} pcase;

/* The events of one run, folded: concatenated content and reasoning, and
 * per call index its name, id and concatenated arguments. */
typedef struct folded {
    char *content, *reasoning;
    size_t n_content, n_reasoning;
    int n_started; /* CALL_START events */
    char *name[8], *id[8], *args[8];
    size_t n_args[8];
    int count;     /* tc_parser_finish's result (-1 before finish) */
    bool bad;      /* an invariant of the event stream broke */
    char why[160];
} folded;

static void cat(char **s, size_t *n, const char *t, size_t k) {
    *s = realloc(*s, *n + k + 1);
    memcpy(*s + *n, t, k);
    *n += k;
    (*s)[*n] = 0;
}

static bool utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

static void fold(folded *r, const tc_events *ev, int from, bool check_utf8) {
    for (int i = from; i < ev->n; i++) {
        const tc_event *e = &ev->v[i];
        if (e->kind != TC_EV_CALL_START && e->n == 0) {
            r->bad = true;
            snprintf(r->why, sizeof r->why, "empty text event %d", e->kind);
        }
        if (e->kind != TC_EV_CALL_START && check_utf8 && !utf8_valid(e->text, e->n)) {
            r->bad = true;
            snprintf(r->why, sizeof r->why, "event split a UTF-8 character: \"%.*s\"", (int)e->n, e->text);
        }
        switch (e->kind) {
        case TC_EV_CONTENT: cat(&r->content, &r->n_content, e->text, e->n); break;
        case TC_EV_REASONING: cat(&r->reasoning, &r->n_reasoning, e->text, e->n); break;
        case TC_EV_CALL_START:
            if (e->index != r->n_started || e->index >= 8 || !e->id || !e->name) {
                r->bad = true;
                snprintf(r->why, sizeof r->why, "CALL_START index %d after %d starts", e->index, r->n_started);
                break;
            }
            r->name[e->index] = strdup(e->name);
            r->id[e->index] = strdup(e->id);
            r->n_started++;
            break;
        case TC_EV_CALL_ARGS:
            if (e->index != r->n_started - 1) {
                r->bad = true;
                snprintf(r->why, sizeof r->why, "CALL_ARGS of %d while call %d is current", e->index, r->n_started - 1);
                break;
            }
            cat(&r->args[e->index], &r->n_args[e->index], e->text, e->n);
            break;
        }
    }
}

static void folded_free(folded *r) {
    free(r->content);
    free(r->reasoning);
    for (int i = 0; i < 8; i++) free(r->name[i]), free(r->id[i]), free(r->args[i]);
    memset(r, 0, sizeof *r);
}

static const char *nz(const char *s) { return s ? s : ""; }

/* Runs a case's text in the given pieces (cuts: ascending offsets). */
static void run_pieces(const pcase *c, const size_t *cuts, int n_cuts, size_t len, bool truncated, folded *r,
                       folded *streamed) {
    memset(r, 0, sizeof *r);
    tc_parser *p = tc_parser_new(c->f, c->tools_on, c->reasoning, c->think_open, 42);
    tc_events ev = {0};
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        int before = ev.n;
        tc_parser_feed(p, c->text + at, to - at, &ev);
        /* a feed's events are new events: the ones before are unchanged */
        for (int k = 0; k < before; k++)
            if (ev.v[k].kind != TC_EV_CALL_START && ev.v[k].n != strlen(ev.v[k].text)) r->bad = true;
        at = to;
    }
    if (streamed) {
        memset(streamed, 0, sizeof *streamed);
        fold(streamed, &ev, 0, utf8_valid(c->text, strlen(c->text)));
    }
    r->count = tc_parser_finish(p, truncated, &ev);
    fold(r, &ev, 0, false);
    tc_events_free(&ev);
    tc_parser_free(p);
}

static bool same(const folded *a, const folded *b) {
    if (a->bad || b->bad) return false;
    if (strcmp(nz(a->content), nz(b->content)) || strcmp(nz(a->reasoning), nz(b->reasoning))) return false;
    if (a->count != b->count || a->n_started != b->n_started) return false;
    for (int i = 0; i < a->n_started; i++) {
        if (strcmp(nz(a->name[i]), nz(b->name[i])) || strcmp(nz(a->id[i]), nz(b->id[i])) ||
            strcmp(nz(a->args[i]), nz(b->args[i])))
            return false;
    }
    return true;
}

static bool is_prefix(const char *a, const char *b) { return strncmp(nz(a), nz(b), strlen(nz(a))) == 0; }

/* What a prefix streamed (before finish) is a prefix of the whole result. */
static bool streams_prefix(const folded *s, const folded *full) {
    if (s->bad) return false;
    if (!is_prefix(s->content, full->content) || !is_prefix(s->reasoning, full->reasoning)) return false;
    if (s->n_started > full->n_started) return false;
    for (int i = 0; i < s->n_started; i++) {
        if (strcmp(nz(s->name[i]), nz(full->name[i])) || strcmp(nz(s->id[i]), nz(full->id[i])) ||
            !is_prefix(s->args[i], full->args[i]))
            return false;
    }
    return true;
}

static void show(const char *what, const folded *r) {
    fprintf(stderr, "    %s: count %d started %d content \"%s\" reasoning \"%s\"%s%s\n", what, r->count, r->n_started,
            nz(r->content), nz(r->reasoning), r->bad ? " BAD: " : "", r->bad ? r->why : "");
    for (int i = 0; i < r->n_started; i++)
        fprintf(stderr, "      call %d %s %s args \"%s\"\n", i, nz(r->id[i]), nz(r->name[i]), nz(r->args[i]));
}

static void check_case(int ci, const pcase *c) {
    size_t len = strlen(c->text);
    folded whole;
    run_pieces(c, NULL, 0, len, false, &whole, NULL);
    bool ok = !whole.bad && whole.count == c->n_calls && strcmp(nz(whole.content), c->content) == 0 &&
              strcmp(nz(whole.reasoning), nz(c->reasoning_text)) == 0 && whole.n_started >= c->n_calls;
    for (int i = 0; ok && i < c->n_calls; i++)
        ok = strcmp(nz(whole.name[i]), c->calls[i].name) == 0 && strcmp(nz(whole.args[i]), c->calls[i].args) == 0 &&
             whole.id[i] && strlen(whole.id[i]) == 29 && strncmp(whole.id[i], "call_", 5) == 0;
    CHECK_MSG(ok, "case %d (%s): %s", ci, tc_format_name(c->f), c->text);
    if (!ok) show("got", &whole);

    /* every split into two pieces, byte by byte, random pieces */
    int n_bad = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        folded r;
        run_pieces(c, &cut, 1, len, false, &r, NULL);
        if (!same(&r, &whole) && n_bad++ == 0) {
            fprintf(stderr, "  case %d: split at %zu differs\n", ci, cut);
            show("split", &r);
        }
        folded_free(&r);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    folded bb;
    run_pieces(c, cuts, len ? (int)len - 1 : 0, len, false, &bb, NULL);
    if (!same(&bb, &whole) && n_bad++ == 0) show("byte by byte", &bb);
    folded_free(&bb);
    for (int round = 0; round < 40; round++) {
        int n = 0;
        size_t at = 0;
        for (;;) {
            at += 1 + rng_u64() % 9;
            if (at >= len) break;
            cuts[n++] = at;
        }
        folded r;
        run_pieces(c, cuts, n, len, false, &r, NULL);
        if (!same(&r, &whole) && n_bad++ == 0) show("random pieces", &r);
        folded_free(&r);
    }
    CHECK_MSG(n_bad == 0, "case %d: %d splits differ from the whole text", ci, n_bad);

    /* every truncation point: the stream so far is a prefix of the whole
     * result; the calls reported complete are the table's first calls */
    n_bad = 0;
    for (size_t t = 0; t <= len; t++) {
        folded r, s;
        pcase tc = *c;
        run_pieces(&tc, NULL, 0, t, true, &r, &s);
        bool good = streams_prefix(&s, &whole) && !r.bad && r.count <= c->n_calls && r.count <= r.n_started;
        for (int i = 0; good && i < r.count; i++)
            good = strcmp(nz(r.name[i]), c->calls[i].name) == 0 && strcmp(nz(r.args[i]), c->calls[i].args) == 0;
        if (!good && n_bad++ == 0) {
            fprintf(stderr, "  case %d: truncated at %zu\n", ci, t);
            show("streamed", &s);
            show("finished", &r);
        }
        folded_free(&r);
        folded_free(&s);
    }
    CHECK_MSG(n_bad == 0, "case %d: %d truncation points misbehave", ci, n_bad);
    free(cuts);
    folded_free(&whole);
}

#define WEATHER "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
#define WEATHER_ARGS "{\"city\": \"Paris\"}"
#define TIME_ARGS "{\"tz\": \"Europe/Paris\"}"
#define NESTED_ARGS "{\"q\": \"a}\\\"{b \\u00e9\", \"n\": [1, {\"x\": null}, -2.5e3], \"t\": true}"

static const pcase cases[] = {
    /* ---- hermes ---- */
    {TC_HERMES, true, false, false, "Hello, world!", "Hello, world!", NULL, 0, {{0}}},
    {TC_HERMES, true, false, false, "<tool_call>\n" WEATHER "\n</tool_call>", "", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_HERMES, true, false, false, "Let me check. \n<tool_call>\n" WEATHER "\n</tool_call>", "Let me check.", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_HERMES, true, false, false,
     "<tool_call>\n" WEATHER "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": " TIME_ARGS
     "}\n</tool_call>",
     "", NULL, 2, {{"get_weather", WEATHER_ARGS}, {"get_time", TIME_ARGS}}},
    {TC_HERMES, true, true, false, "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n" WEATHER "\n</tool_call>",
     "", "The user wants the weather.", 1, {{"get_weather", WEATHER_ARGS}}},
    {TC_HERMES, true, true, true, "Je pense: é 你好 🙂\n</think>\n\nVoilà 🙂 <b>", "Voilà 🙂 <b>", "Je pense: é 你好 🙂", 0,
     {{0}}},
    {TC_HERMES, false, true, false, "<think>x</think>" "<tool_call>\n" WEATHER "\n</tool_call>",
     "<tool_call>\n" WEATHER "\n</tool_call>", "x", 0, {{0}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": " NESTED_ARGS "}\n</tool_call>", "",
     NULL, 1, {{"f", NESTED_ARGS}}},
    /* arguments before the name; arguments as a string; an extra key */
    {TC_HERMES, true, false, false, "<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"f\"}\n</tool_call>", "", NULL,
     1, {{"f", "{\"x\": 1}"}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"\\u00e9\\\"}\"}\n</tool_call>",
     "", NULL, 1, {{"f", "{\"x\": \"é\"}"}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": \"f\", \"id\": 7, \"arguments\": {}}\n</tool_call>", "",
     NULL, 1, {{"f", "{}"}}},
    {TC_HERMES, true, false, false, "<tool_call>{\"name\": \"f\"}</tool_call>", "", NULL, 1, {{"f", "{}"}}},
    /* two objects in one block */
    {TC_HERMES, true, false, false, "<tool_call>\n" WEATHER "\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", "",
     NULL, 2, {{"get_weather", WEATHER_ARGS}, {"g", "{}"}}},
    {TC_HERMES, true, false, false, "<tool_call>\n" WEATHER "\n{\"nam</tool_call>", "{\"nam</tool_call>", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    /* no closing tag at the end; text after the calls */
    {TC_HERMES, true, false, false, "<tool_call>\n" WEATHER, "", NULL, 1, {{"get_weather", WEATHER_ARGS}}},
    {TC_HERMES, true, false, false, "<tool_call>\n" WEATHER "\n</tool_call>\n\nDone.", "Done.", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_HERMES, true, false, false, "<tool_call>\n" WEATHER "\n</tool_cal>", "</tool_cal>", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    /* malformed: before the call started (content, scanning goes on) and after */
    {TC_HERMES, true, false, false, "Use <tool_call> tags, <tool_ and <tool_call>\nnot json</tool_call>",
     "Use <tool_call> tags, <tool_ and <tool_call>\nnot json</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, true, false, false, "<tool_call> <tool_call>\n" WEATHER "\n</tool_call>", "<tool_call> ", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>",
     "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, true, false, false, "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call> bye",
     "Hi<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call> bye", NULL, 0, {{0}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"name\": \"g\"}</tool_call>",
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"name\": \"g\"}</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
     "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, true, false, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": bad}}</tool_call>",
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": bad}}</tool_call>", NULL, 0, {{0}}},
    /* a call then a broken one: the first counts, the rest is content */
    {TC_HERMES, true, false, false,
     "<tool_call>\n" WEATHER "\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {]}\n</tool_call>",
     "<tool_call>\n{\"name\": \"g\", \"arguments\": {]}\n</tool_call>", NULL, 1, {{"get_weather", WEATHER_ARGS}}},
    {TC_NONE, true, true, false, "  <think>a</think>b {\"name\": \"f\", \"arguments\": {}}",
     "b {\"name\": \"f\", \"arguments\": {}}", "a", 0, {{0}}},
    {TC_HERMES, true, true, false, "<thin>k", "<thin>k", NULL, 0, {{0}}},

    /* ---- llama3 ---- */
    {TC_LLAMA3, true, false, false, "{\"name\": \"get_weather\", \"parameters\": " WEATHER_ARGS "}", "", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_LLAMA3, true, false, false, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": " WEATHER_ARGS "}", "",
     NULL, 1, {{"get_weather", WEATHER_ARGS}}},
    {TC_LLAMA3, true, false, false,
     "{\"name\": \"get_weather\", \"parameters\": " WEATHER_ARGS "}; {\"name\": \"get_time\", \"parameters\": " TIME_ARGS
     "}",
     "", NULL, 2, {{"get_weather", WEATHER_ARGS}, {"get_time", TIME_ARGS}}},
    {TC_LLAMA3, true, false, false, "Here: {\"a\": 1} and {braces} ok", "Here: {\"a\": 1} and {braces} ok", NULL, 0,
     {{0}}},
    {TC_LLAMA3, true, false, false, "{\"name\": \"John\", \"age\": 30}", "{\"name\": \"John\", \"age\": 30}", NULL, 0,
     {{0}}},
    {TC_LLAMA3, true, false, false, "Sure.\n\n{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}",
     "Sure.", NULL, 1, {{"f", "{\"a\": [1, 2]}"}}},
    {TC_LLAMA3, true, false, false, "{\"name\": \"f\", \"parameters\": {\"a\": 1}} and then", "and then", NULL, 1,
     {{"f", "{\"a\": 1}"}}},

    {TC_LLAMA3, true, true, false, "<think>\nweather\n</think>\n\n{\"name\": \"f\", \"parameters\": {}}", "", "weather", 1,
     {{"f", "{}"}}},
    {TC_LLAMA3, true, false, false, "{\"name\": \"f\", \"parameters\": {\"a\": }}",
     "{\"name\": \"f\", \"parameters\": {\"a\": }}", NULL, 0, {{0}}},
    {TC_LLAMA3, true, false, false, "{\"parameters\": {\"a\": 1}, \"name\": \"f\"}", "", NULL, 1, {{"f", "{\"a\": 1}"}}},

    /* ---- mistral ---- */
    {TC_MISTRAL, true, false, false, "[TOOL_CALLS] [" WEATHER "]", "", NULL, 1, {{"get_weather", WEATHER_ARGS}}},
    {TC_MISTRAL, true, false, false,
     "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": " WEATHER_ARGS ", \"id\": \"abcDEF123\"}, "
     "{\"name\": \"get_time\", \"arguments\": " TIME_ARGS ", \"id\": \"xyzXYZ789\"}]",
     "", NULL, 2, {{"get_weather", WEATHER_ARGS}, {"get_time", TIME_ARGS}}},
    {TC_MISTRAL, true, false, false, "I'll look.[TOOL_CALLS]" WEATHER, "I'll look.", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_MISTRAL, true, false, false, "[TOOL_CALLS] []", "[TOOL_CALLS] []", NULL, 0, {{0}}},
    {TC_MISTRAL, true, false, false, "[TOOL_ CALLS] [x]", "[TOOL_ CALLS] [x]", NULL, 0, {{0}}},

    {TC_MISTRAL, true, true, false, "<think>ok</think>[TOOL_CALLS] [" WEATHER "]", "", "ok", 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_MISTRAL, true, false, false, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\" 1}}]",
     "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\" 1}}]", NULL, 0, {{0}}},
    {TC_MISTRAL, true, false, false, "[TOOL_CALLS] [" WEATHER ", 3]", ", 3]", NULL, 1, {{"get_weather", WEATHER_ARGS}}},

    /* ---- generic ---- */
    {TC_GENERIC, true, false, false, "{\"tool_calls\": [" WEATHER "]}", "", NULL, 1, {{"get_weather", WEATHER_ARGS}}},
    {TC_GENERIC, true, false, false,
     "Calling.\n{\"tool_calls\": [" WEATHER ", {\"name\": \"get_time\", \"arguments\": " TIME_ARGS "}]}", "Calling.",
     NULL, 2, {{"get_weather", WEATHER_ARGS}, {"get_time", TIME_ARGS}}},
    {TC_GENERIC, true, false, false, "{ \"tool_calls\" : [ " WEATHER " ] }", "", NULL, 1,
     {{"get_weather", WEATHER_ARGS}}},
    {TC_GENERIC, true, false, false, "x {\"a\": {\"tool_calls\": 1}} y", "x {\"a\": {\"tool_calls\": 1}} y", NULL, 0,
     {{0}}},
    {TC_GENERIC, true, false, false, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1]}]}",
     "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1]}]}", NULL, 0, {{0}}},
    {TC_GENERIC, true, true, false, "<think>\nhm\n\n</think>\n{\"tool_calls\": [" WEATHER "]}", "", "hm", 1,
     {{"get_weather", WEATHER_ARGS}}},
};

/* harmony (gpt-oss): the prompt ends with "<|start|>assistant", so the
 * output starts with the rest of a header; <|call|> and <|return|> end the
 * generation and normally never reach the parser (they are end-of-
 * generation tokens), <|end|> does */
#define HM_AN "<|channel|>analysis<|message|>"
#define HM_NEXT "<|end|><|start|>assistant"
#define HM_CALL(fn) "<|channel|>commentary to=functions." fn " <|constrain|>json<|message|>"
static const pcase hm_cases[] = {
    {TC_HARMONY, true, false, false, HM_AN "Need the weather." HM_NEXT "<|channel|>final<|message|>It is sunny.",
     "It is sunny.", "Need the weather.", 0, {{0}}},
    {TC_HARMONY, true, true, false, HM_AN "Look it up." HM_NEXT HM_CALL("get_weather") WEATHER_ARGS, "", "Look it up.",
     1, {{"get_weather", WEATHER_ARGS}}},
    /* the recipient in the role header, no <|constrain|> (how the template renders past calls) */
    {TC_HARMONY, true, false, false, " to=functions.get_weather<|channel|>commentary json<|message|>" NESTED_ARGS, "",
     NULL, 1, {{"get_weather", NESTED_ARGS}}},
    /* a preamble on commentary is content; the call ended by <|call|>; final ended by <|return|> */
    {TC_HARMONY, true, false, false,
     "<|channel|>commentary<|message|>Checking… 🙂" HM_NEXT HM_CALL("get_time") TIME_ARGS "<|call|>", "Checking… 🙂",
     NULL, 1, {{"get_time", TIME_ARGS}}},
    {TC_HARMONY, true, false, false, "<|channel|>final<|message|>Done <b>.<|return|>", "Done <b>.", NULL, 0, {{0}}},
    /* a call, then more messages */
    {TC_HARMONY, true, false, false, HM_CALL("f") "{}" HM_NEXT "<|channel|>final<|message|>ok", "ok", NULL, 1,
     {{"f", "{}"}}},
    /* tools off: the call's body is content; not a function: content */
    {TC_HARMONY, false, false, false, HM_AN "x" HM_NEXT HM_CALL("f") WEATHER_ARGS, WEATHER_ARGS, "x", 0, {{0}}},
    {TC_HARMONY, true, false, false, "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}", "{\"q\": 1}",
     NULL, 0, {{0}}},
    /* not harmony at all (a random model): all content */
    {TC_HARMONY, true, false, false, "Hello <b> <| world", "Hello <b> <| world", NULL, 0, {{0}}},
    /* malformed: arguments that are not a JSON object, a header that never ends */
    {TC_HARMONY, true, false, false, HM_CALL("f") "not json" HM_NEXT "<|channel|>final<|message|>x",
     HM_CALL("f") "not json" HM_NEXT "<|channel|>final<|message|>x", NULL, 0, {{0}}},
    {TC_HARMONY, true, false, false, HM_CALL("f") "[1, 2]", HM_CALL("f") "[1, 2]", NULL, 0, {{0}}},
    {TC_HARMONY, true, false, false, "<|channel|>final<|end|>tail", "<|channel|>finaltail", NULL, 0, {{0}}},
    /* a call cut inside its arguments (truncated): raw text as content */
    {TC_HARMONY, true, false, false, HM_AN "a" HM_NEXT HM_CALL("f") "{\"a\": ",
     "<|start|>assistant" HM_CALL("f") "{\"a\": ", "a", 0, {{0}}},
};

static void test_parser(void) {
    for (size_t i = 0; i < ARRAY_LEN(hm_cases); i++) check_case(100 + (int)i, &hm_cases[i]);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) check_case((int)i, &cases[i]);
}

/* Random outputs glued from fragments of every format (markers, call JSON,
 * broken JSON, text, UTF-8, think tags): pieces never change the result,
 * what a prefix streams is a prefix of the whole result, and every complete
 * call has a name and arguments that parse as JSON. */
static void test_random_outputs(void) {
    static const char *frag[] = {
        "<tool_call>", "\n</tool_call>", "</tool_call>", "[TOOL_CALLS]", " [", "]", ", ", "; ", "<|python_tag|>",
        "{\"tool_calls\": [", "]}", "{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}",
        "{\"name\": \"g\", \"parameters\": {}}", "{\"arguments\": \"{}\", \"name\": \"h\"}", "{\"name\": ",
        "\"x\"", "{", "}", "\"", "\\", ":", "\n", "  ", "text", " é", "你好", "🙂", "<think>", "</think>", "\n\n",
        "<tool", "_call>", "{\"a\": 1}", "null", "[1, 2]", "{\"name\": \"f\", \"arguments\": {\"b\": ",
        "<|channel|>", "analysis", "final", "commentary to=functions.f", " <|constrain|>json", "<|message|>",
        "<|end|>", "<|start|>assistant", "<|call|>", "<|", " to=functions.g",
    };
    int n_bad = 0, n_with_calls = 0, n_broken = 0;
    for (int round = 0; round < 1200; round++) {
        char text[1024];
        size_t len = 0;
        int n_frag = 1 + (int)(rng_u64() % 14);
        for (int k = 0; k < n_frag; k++) {
            const char *f = frag[rng_u64() % ARRAY_LEN(frag)];
            size_t fl = strlen(f);
            if (len + fl >= sizeof text) break;
            memcpy(text + len, f, fl);
            len += fl;
        }
        text[len] = 0;
        uint64_t m = rng_u64();
        pcase c = {(tc_format)(1 + m % 5), (m >> 3) % 4 != 0, (m >> 5) & 1, (m >> 6) % 4 == 0, text, NULL, NULL, 0, {{0}}};
        folded whole;
        run_pieces(&c, NULL, 0, len, false, &whole, NULL);
        bool ok = !whole.bad && whole.count <= whole.n_started;
        n_with_calls += whole.count > 0;
        n_broken += whole.n_started > whole.count;
        for (int i = 0; ok && i < whole.count; i++) {
            json_error_t je;
            json_t *a = json_loadb(nz(whole.args[i]), strlen(nz(whole.args[i])), JSON_DECODE_ANY, &je);
            ok = whole.name[i] && whole.name[i][0] && a;
            json_decref(a);
        }
        size_t cuts[64];
        int n = 0;
        for (size_t at = 1 + rng_u64() % 5; at < len && n < 64; at += 1 + rng_u64() % 7) cuts[n++] = at;
        folded r;
        run_pieces(&c, cuts, n, len, false, &r, NULL);
        ok = ok && same(&r, &whole);
        folded_free(&r);
        folded s0, s1;
        size_t t = len ? rng_u64() % len : 0;
        run_pieces(&c, NULL, 0, t, true, &s1, &s0);
        ok = ok && streams_prefix(&s0, &whole) && !s1.bad;
        folded_free(&s0);
        folded_free(&s1);
        if (!ok && n_bad++ < 3) {
            fprintf(stderr, "  random output (%s, tools %d, reasoning %d, open %d): \"%s\"\n", tc_format_name(c.f),
                    c.tools_on, c.reasoning, c.think_open, text);
            show("whole", &whole);
        }
        folded_free(&whole);
    }
    CHECK_MSG(n_bad == 0, "%d random outputs misbehave", n_bad);
    /* the fragments do make calls, and broken ones */
    CHECK_MSG(n_with_calls > 50 && n_broken > 20, "%d with calls, %d broken", n_with_calls, n_broken);
}

/* Truncated outputs, spelled out: an incomplete call is not a call and,
 * cut by the length limit, never text (neither is a marker cut half-way);
 * held text is content; a complete call whose closing tag was cut still
 * counts. The same outputs ended by the model itself (not truncated) give
 * the incomplete call's raw text as content (`untrunc`). */
static void test_truncated(void) {
    static const struct {
        tc_format f;
        const char *text, *content;
        int count, started;
        const char *args0, *untrunc;
    } t[] = {
        {TC_HERMES, "Hello <tool_ca", "Hello", 0, 0, NULL, "Hello <tool_ca"},
        {TC_HERMES, "Hello\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "Hello", 0, 1,
         "{\"city\": \"Pa", "Hello<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa"},
        {TC_HERMES, "<tool_call>\n{\"name\": \"get_wea", "", 0, 0, NULL, "<tool_call>\n{\"name\": \"get_wea"},
        {TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"argu", "", 0, 1, NULL,
         "<tool_call>\n{\"name\": \"get_weather\", \"argu"},
        {TC_HERMES, "<tool_call>\n" WEATHER "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {",
         "", 1, 2, WEATHER_ARGS, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {"},
        {TC_LLAMA3, "{\"name\": \"get_weather\", \"param", "", 0, 0, NULL, "{\"name\": \"get_weather\", \"param"},
        {TC_HERMES, "<tool_call>\n" WEATHER "\n</tool_", "", 1, 1, WEATHER_ARGS, ""},
        {TC_MISTRAL, "[TOOL_CALLS] [" WEATHER ", {\"name\": \"g\", ", "", 1, 2, WEATHER_ARGS, "{\"name\": \"g\", "},
        {TC_GENERIC, "Calling.\n{\"tool_calls\": [", "Calling.", 0, 0, NULL, "Calling.\n{\"tool_calls\": ["},
        {TC_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"q\": \"\xc3", "", 0, 1, "{\"q\": \"\xc3",
         "{\"name\": \"f\", \"parameters\": {\"q\": \"\xc3"},
    };
    for (size_t i = 0; i < ARRAY_LEN(t); i++) {
        pcase c = {t[i].f, true, false, false, t[i].text, NULL, NULL, 0, {{0}}};
        for (int trunc = 1; trunc >= 0; trunc--) {
            const char *want = trunc ? t[i].content : t[i].untrunc;
            folded r;
            run_pieces(&c, NULL, 0, strlen(t[i].text), trunc, &r, NULL);
            bool ok = !r.bad && r.count == t[i].count && r.n_started == t[i].started && strcmp(nz(r.content), want) == 0 &&
                      (!t[i].args0 || strcmp(nz(r.args[0]), t[i].args0) == 0);
            CHECK_MSG(ok, "truncated case %zu (truncated %d)", i, trunc);
            if (!ok) show("got", &r);
            folded_free(&r);
        }
    }
}

/* Streaming: the call starts as soon as its name is parsed, arguments flow
 * as they come, a half marker is never content, UTF-8 is never split. */
static void test_streaming(void) {
    tc_parser *p = tc_parser_new(TC_HERMES, true, false, false, 3);
    tc_events ev = {0};
    const char *s1 = "Sure \xc3";
    tc_parser_feed(p, s1, strlen(s1), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_CONTENT && strcmp(ev.v[0].text, "Sure ") == 0);
    tc_events_clear(&ev);
    const char *s2 = "\xa9!\n<tool";
    tc_parser_feed(p, s2, strlen(s2), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_CONTENT && strcmp(ev.v[0].text, "é!") == 0);
    tc_events_clear(&ev);
    const char *s3 = "_call>\n{\"name\": \"get_weather\"";
    tc_parser_feed(p, s3, strlen(s3), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_CALL_START && ev.v[0].index == 0 &&
          strcmp(ev.v[0].name, "get_weather") == 0);
    tc_events_clear(&ev);
    const char *s4 = ", \"arguments\": {\"city\": \"Pa";
    tc_parser_feed(p, s4, strlen(s4), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_CALL_ARGS && strcmp(ev.v[0].text, "{\"city\": \"Pa") == 0);
    tc_events_clear(&ev);
    const char *s5 = "ris\"}}\n</tool_call>";
    tc_parser_feed(p, s5, strlen(s5), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_CALL_ARGS && strcmp(ev.v[0].text, "ris\"}") == 0);
    tc_events_clear(&ev);
    CHECK_EQ_INT(tc_parser_finish(p, false, &ev), 1);
    CHECK_EQ_INT(ev.n, 0);
    tc_parser_feed(p, "x", 1, &ev); /* after finish: ignored */
    CHECK_EQ_INT(ev.n, 0);
    tc_events_free(&ev);
    tc_parser_free(p);

    /* reasoning streams too, without the tags and the newlines around */
    p = tc_parser_new(TC_HERMES, true, true, false, 3);
    const char *r1 = "<think>\nStep one.\n</thi";
    tc_parser_feed(p, r1, strlen(r1), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_REASONING && strcmp(ev.v[0].text, "Step one.") == 0);
    tc_events_clear(&ev);
    const char *r2 = "nk>\n\nAnswer.";
    tc_parser_feed(p, r2, strlen(r2), &ev);
    CHECK(ev.n == 1 && ev.v[0].kind == TC_EV_CONTENT && strcmp(ev.v[0].text, "Answer.") == 0);
    CHECK_EQ_INT(tc_parser_finish(p, false, &ev), 0);
    tc_events_free(&ev);
    tc_parser_free(p);
}

/* Ids: "call_" + 24 alphanumerics, stable per (seed, index), distinct. */
static void test_ids(void) {
    const char *text = "<tool_call>\n" WEATHER "\n</tool_call>\n<tool_call>\n" WEATHER "\n</tool_call>";
    char *ids[4] = {0};
    for (int k = 0; k < 3; k++) {
        tc_parser *p = tc_parser_new(TC_HERMES, true, false, false, k == 2 ? 7 : 6);
        tc_events ev = {0};
        tc_parser_feed(p, text, strlen(text), &ev);
        CHECK_EQ_INT(tc_parser_finish(p, false, &ev), 2);
        int j = 0;
        for (int i = 0; i < ev.n; i++) {
            if (ev.v[i].kind != TC_EV_CALL_START) continue;
            const char *id = ev.v[i].id;
            CHECK(strlen(id) == 29 && strncmp(id, "call_", 5) == 0);
            for (int c = 5; c < 29; c++)
                CHECK_MSG((id[c] >= 'a' && id[c] <= 'z') || (id[c] >= 'A' && id[c] <= 'Z') || (id[c] >= '0' && id[c] <= '9'),
                          "%s", id);
            if (k == 0 && j < 2) ids[j] = strdup(id);
            if (k == 1 && j < 2) CHECK_STR(id, ids[j]);
            if (k == 2 && j == 0) ids[2] = strdup(id);
            j++;
        }
        tc_events_free(&ev);
        tc_parser_free(p);
    }
    CHECK(ids[0] && ids[1] && ids[2] && strcmp(ids[0], ids[1]) != 0 && strcmp(ids[0], ids[2]) != 0);
    for (int i = 0; i < 4; i++) free(ids[i]);
}

/* ---- grammars ---- */

/* The grammar's language contains text (whole), or a prefix of it only. */
static int lang_has(const char *gbnf, const char *text, bool *complete) {
    grammar *g = NULL;
    err_t e = {0};
    if (grammar_from_gbnf(gbnf, strlen(gbnf), &g, &e) != 0) {
        fprintf(stderr, "grammar does not compile: %s\n%s\n", e.msg, gbnf);
        return -1;
    }
    gmatch *m = gmatch_new(g, NULL);
    int rc = gmatch_accept_bytes(m, text, strlen(text));
    *complete = rc == 0 && gmatch_can_end(m);
    gmatch_free(m);
    grammar_unref(g);
    return rc;
}

static bool accepts(const char *gbnf, const char *text) {
    bool complete = false;
    return lang_has(gbnf, text, &complete) == 0 && complete;
}

static bool refuses(const char *gbnf, const char *text) {
    bool complete = false;
    int rc = lang_has(gbnf, text, &complete);
    return rc == ERR_INVALID || (rc == 0 && !complete);
}

static void test_grammar(void) {
    json_t *tools = load(TOOLS_JSON);
    static const struct {
        tc_format f;
        const char *trigger;
        const char *one, *two; /* the canonical text of one call and of two */
        const char *unknown, *trailing;
    } g[] = {
        {TC_HERMES, "<tool_call>", "<tool_call>\n" WEATHER "\n</tool_call>",
         "<tool_call>\n" WEATHER "\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {}}\n</tool_call>",
         "<tool_call>\n" WEATHER "\n</tool_call> ok"},
        {TC_LLAMA3, "{\"", "{\"name\": \"get_weather\", \"parameters\": " WEATHER_ARGS "}",
         "{\"name\": \"get_weather\", \"parameters\": " WEATHER_ARGS "}; {\"name\": \"get_time\", \"parameters\": " TIME_ARGS "}",
         "{\"name\": \"nope\", \"parameters\": {}}", "{\"name\": \"ping\", \"parameters\": {}}\n"},
        {TC_MISTRAL, "[TOOL_CALLS]", "[TOOL_CALLS] [" WEATHER "]",
         "[TOOL_CALLS] [" WEATHER ", {\"name\": \"get_time\", \"arguments\": " TIME_ARGS "}]",
         "[TOOL_CALLS] [{\"name\": \"x\", \"arguments\": {}}]", "[TOOL_CALLS] [" WEATHER "]</s>"},
        {TC_GENERIC, "{\"tool_calls\"", "{\"tool_calls\": [" WEATHER "]}",
         "{\"tool_calls\": [" WEATHER ", {\"name\": \"ping\", \"arguments\": {}}]}",
         "{\"tool_calls\": [{\"name\": \"get\", \"arguments\": {}}]}", "{\"tool_calls\": [" WEATHER "]}}"},
    };
    for (size_t i = 0; i < ARRAY_LEN(g); i++) {
        const char *fn = tc_format_name(g[i].f);
        for (int mode = 0; mode < 4; mode++) {
            bool parallel = mode & 1, lazy = mode & 2;
            char *gbnf = NULL, *trigger = NULL;
            err_t e = {0};
            int rc = tc_grammar(g[i].f, tools, NULL, parallel, lazy, &gbnf, &trigger, &e);
            CHECK_MSG(rc == 0, "%s: %s", fn, e.msg);
            if (rc) continue;
            if (lazy) {
                CHECK_STR(trigger, g[i].trigger);
            } else {
                CHECK(trigger == NULL);
            }
            size_t skip = lazy ? strlen(g[i].trigger) : 0;
            /* the lazy grammar starts right after the trigger: the canonical
             * texts start with it */
            CHECK(strncmp(g[i].one, g[i].trigger, strlen(g[i].trigger)) == 0);
            CHECK_MSG(accepts(gbnf, g[i].one + skip), "%s mode %d: refuses %s", fn, mode, g[i].one + skip);
            if (parallel) {
                CHECK_MSG(accepts(gbnf, g[i].two + skip), "%s mode %d: refuses %s", fn, mode, g[i].two + skip);
            } else {
                CHECK_MSG(refuses(gbnf, g[i].two + skip), "%s mode %d: accepts two calls", fn, mode);
            }
            CHECK_MSG(refuses(gbnf, g[i].unknown + skip), "%s mode %d: accepts %s", fn, mode, g[i].unknown);
            CHECK_MSG(refuses(gbnf, g[i].trailing + skip), "%s mode %d: accepts %s", fn, mode, g[i].trailing);
            /* arguments are held to the schema */
            char bad[256];
            snprintf(bad, sizeof bad, "%s", g[i].one + skip);
            char *city = strstr(bad, "\"city\"");
            if (city) memcpy(city, "\"town\"", 6);
            CHECK_MSG(refuses(gbnf, bad), "%s mode %d: accepts %s", fn, mode, bad);
            /* what the grammar accepts, the parser takes as the call */
            if (!lazy) {
                tc_parser *p = tc_parser_new(g[i].f, true, false, false, 1);
                tc_events ev = {0};
                tc_parser_feed(p, g[i].one, strlen(g[i].one), &ev);
                CHECK_EQ_INT(tc_parser_finish(p, false, &ev), 1);
                tc_events_free(&ev);
                tc_parser_free(p);
            }
            free(gbnf);
            free(trigger);
        }
        /* only one tool */
        char *gbnf = NULL, *trigger = NULL;
        err_t e = {0};
        CHECK_EQ_INT(tc_grammar(g[i].f, tools, "get_time", false, false, &gbnf, &trigger, &e), 0);
        if (gbnf) CHECK_MSG(refuses(gbnf, g[i].one), "%s: only get_time, accepts get_weather", fn);
        free(gbnf);
        CHECK_EQ_INT(tc_grammar(g[i].f, tools, "nope", false, false, &gbnf, &trigger, &e), ERR_INVALID);
        CHECK(strstr(e.msg, "'nope'") != NULL);
    }
    /* harmony: the lazy grammar starts after "to=functions." (either header
     * order), the full one with the commentary header; one call a message */
    for (int mode = 0; mode < 4; mode++) {
        bool parallel = mode & 1, lazy = mode & 2;
        char *gbnf = NULL, *trigger = NULL;
        err_t e = {0};
        CHECK_EQ_INT(tc_grammar(TC_HARMONY, tools, NULL, parallel, lazy, &gbnf, &trigger, &e), 0);
        if (!gbnf) continue;
        const char *pre = lazy ? "" : "<|channel|>commentary to=functions.";
        static const char *const ok[] = {"get_weather <|constrain|>json<|message|>" WEATHER_ARGS,
                                         "get_weather<|channel|>commentary json<|message|>" WEATHER_ARGS,
                                         "ping<|message|>{}"};
        static const char *const no[] = {"get_weather <|constrain|>json<|message|>{\"town\": \"Paris\"}",
                                         "get_wether <|constrain|>json<|message|>" WEATHER_ARGS,
                                         "get_weather <|constrain|>json<|message|>" WEATHER_ARGS "<|end|>",
                                         "get_weather <|constrain|>json<|message|>" WEATHER_ARGS WEATHER_ARGS,
                                         "get_weatherjson<|message|>" WEATHER_ARGS,
                                         "get_weather<|channel|>commentaryjson<|message|>" WEATHER_ARGS};
        char text[256];
        for (size_t k = 0; k < ARRAY_LEN(ok); k++) {
            snprintf(text, sizeof text, "%s%s", pre, ok[k]);
            CHECK_MSG(accepts(gbnf, text), "harmony mode %d: refuses %s", mode, text);
        }
        for (size_t k = 0; k < ARRAY_LEN(no); k++) {
            snprintf(text, sizeof text, "%s%s", pre, no[k]);
            CHECK_MSG(refuses(gbnf, text), "harmony mode %d: accepts %s", mode, text);
        }
        if (lazy) CHECK_STR(trigger, "to=functions.");
        else CHECK(trigger == NULL);
        /* what the grammar accepts, the parser takes as the call */
        snprintf(text, sizeof text, "<|channel|>commentary to=functions.%s", ok[0]);
        tc_parser *p = tc_parser_new(TC_HARMONY, true, false, false, 1);
        tc_events ev = {0};
        tc_parser_feed(p, text, strlen(text), &ev);
        CHECK_EQ_INT(tc_parser_finish(p, false, &ev), 1);
        tc_events_free(&ev);
        tc_parser_free(p);
        free(gbnf);
        free(trigger);
    }

    /* errors name the tool (five patternProperties: the schema compiler
     * takes up to four since 0bcf51a, which made two a valid example) */
    json_t *bad = load("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": \"function\", \"function\":"
                       " {\"name\": \"g\", \"parameters\": {\"type\": \"object\", \"patternProperties\": {\"a\": {}, \"b\": {}, \"c\": {},"
                       " \"d\": {}, \"e\": {}}}}}]");
    char *gbnf = NULL, *trigger = NULL;
    err_t e = {0};
    int rc = tc_grammar(TC_HERMES, bad, NULL, true, true, &gbnf, &trigger, &e);
    CHECK_MSG(rc == ERR_UNSUPPORTED && strstr(e.msg, "tools[1].function.parameters") && strstr(e.msg, "patternProperties"),
              "%d %s", rc, e.msg);
    CHECK(gbnf == NULL && trigger == NULL);
    json_decref(bad);
    CHECK_EQ_INT(tc_grammar(TC_NONE, tools, NULL, true, true, &gbnf, &trigger, &e), ERR_INVALID);
    json_decref(tools);
}

int main(void) {
    test_detect();
    test_check_tools();
    test_parser();
    test_random_outputs();
    test_truncated();
    test_streaming();
    test_ids();
    test_grammar();
    return test_summary("test_toolcall");
}
