/*
 * test_chat.c — chat templates end to end: real model templates
 * (tests/fixtures/templates/NAME.jinja) rendered over OpenAI-style
 * conversations and compared with expected texts written by hand from each
 * template's semantics (tests/fixtures/templates/expected/, listed in
 * cases.json); the ChatML fallback and its reason; message validation
 * errors that name the field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "chat/chat.h"

#define FIX "tests/fixtures/templates/"

static char *read_text(const char *path) {
    char *s = NULL;
    size_t n;
    err_t e = {0};
    if (file_read_all(path, &s, &n, &e) != 0) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.msg);
        return NULL;
    }
    return s;
}

/* Prints where two strings first differ (to make failures readable). */
static void show_diff(const char *name, const char *got, const char *want) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    fprintf(stderr, "  %s: first difference at byte %zu\n  got:  \"%.80s\"\n  want: \"%.80s\"\n", name, i, got + i, want + i);
}

static void run_cases(void) {
    json_error_t je;
    json_t *spec = json_load_file(FIX "cases.json", 0, &je);
    CHECK_MSG(spec != NULL, "cases.json: %s", je.text);
    if (!spec) return;
    json_t *tools = json_object_get(spec, "tools"), *convs = json_object_get(spec, "conversations");
    size_t i;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(json_object_get(spec, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *tfile = json_string_value(json_object_get(c, "template"));
        char path[512];
        char *src = NULL;
        if (tfile) {
            snprintf(path, sizeof path, FIX "%s", tfile);
            src = read_text(path);
            CHECK_MSG(src != NULL, "%s: template %s", name, path);
            if (!src) continue;
        }
        chat_tmpl *t = NULL;
        err_t e = {0};
        CHECK_EQ_INT(chat_tmpl_new(src, &t, &e), 0);
        bool expect_fallback = !tfile || strcmp(tfile, "unsupported.jinja") == 0;
        CHECK_MSG((chat_tmpl_fallback_reason(t) != NULL) == expect_fallback, "%s: fallback reason %s", name,
                  chat_tmpl_fallback_reason(t) ? chat_tmpl_fallback_reason(t) : "(none)");
        const char *fixed = json_string_value(json_object_get(c, "fixed_date"));
        if (fixed) setenv("KVLOOM_FIXED_DATE", fixed, 1);
        else unsetenv("KVLOOM_FIXED_DATE");
        chat_opts o = {
            .bos_token = json_string_value(json_object_get(c, "bos")),
            .eos_token = json_string_value(json_object_get(c, "eos")),
            .add_generation_prompt = json_is_true(json_object_get(c, "gen")),
            .tools = json_is_true(json_object_get(c, "tools")) ? tools : NULL,
            .extra = json_object_get(c, "extra"),
        };
        json_t *msgs = json_object_get(convs, json_string_value(json_object_get(c, "conv")));
        char *out = NULL;
        int rc = chat_render(t, msgs, &o, &out, &e);
        const char *want_err = json_string_value(json_object_get(c, "error"));
        if (want_err) {
            CHECK_MSG(rc < 0 && strstr(e.msg, want_err) != NULL, "%s: rc %d, message \"%s\"", name, rc, e.msg);
            CHECK(out == NULL);
        } else {
            CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
            snprintf(path, sizeof path, FIX "expected/%s.txt", name);
            char *want = read_text(path);
            CHECK_MSG(want != NULL, "%s: missing %s", name, path);
            if (want && out) {
                size_t wl = strlen(want);
                if (wl && want[wl - 1] == '\n') want[wl - 1] = 0; /* files end with one extra newline */
                bool same = strcmp(out, want) == 0;
                CHECK_MSG(same, "%s: rendering differs from %s", name, path);
                if (!same) show_diff(name, out, want);
            }
            free(want);
        }
        free(out);
        free(src);
        chat_tmpl_free(t);
        n_cases++;
    }
    unsetenv("KVLOOM_FIXED_DATE");
    CHECK_MSG(n_cases >= 20, "only %d cases", n_cases);
    json_decref(spec);
}

/* The fallback reasons name what went wrong. */
static void test_fallback_reasons(void) {
    chat_tmpl *t;
    err_t e = {0};
    CHECK_EQ_INT(chat_tmpl_new(NULL, &t, &e), 0);
    CHECK_STR(chat_tmpl_fallback_reason(t), "model has no chat template");
    chat_tmpl_free(t);

    CHECK_EQ_INT(chat_tmpl_new("", &t, &e), 0);
    CHECK(chat_tmpl_fallback_reason(t) != NULL);
    chat_tmpl_free(t);

    CHECK_EQ_INT(chat_tmpl_new("{{ messages | wordwrap(5) }}", &t, &e), 0);
    const char *r = chat_tmpl_fallback_reason(t);
    CHECK_MSG(r && strstr(r, "unsupported filter 'wordwrap'") && strstr(r, "1:15"), "%s", r ? r : "(null)");
    chat_tmpl_free(t);

    CHECK_EQ_INT(chat_tmpl_new("{% for m in messages %}{{ m.content }}", &t, &e), 0);
    r = chat_tmpl_fallback_reason(t);
    CHECK_MSG(r && strstr(r, "endfor"), "%s", r ? r : "(null)");
    chat_tmpl_free(t);

    CHECK_EQ_INT(chat_tmpl_new("{% for m in messages %}{{ m.content }}{% endfor %}", &t, &e), 0);
    CHECK(chat_tmpl_fallback_reason(t) == NULL);
    chat_tmpl_free(t);
    chat_tmpl_free(NULL);
}

static int render_json(const char *tmpl_src, const char *messages_json, const chat_opts *o, char **out, err_t *e) {
    chat_tmpl *t;
    chat_tmpl_new(tmpl_src, &t, e);
    json_error_t je;
    json_t *m = json_loads(messages_json, 0, &je);
    if (!m) {
        fprintf(stderr, "bad test JSON: %s\n", je.text);
        chat_tmpl_free(t);
        return -100;
    }
    int rc = chat_render(t, m, o, out, e);
    json_decref(m);
    chat_tmpl_free(t);
    return rc;
}

/* Malformed requests give ERR_INVALID / ERR_UNSUPPORTED naming the field. */
static void test_validation(void) {
    static const struct {
        const char *messages;
        int code;
        const char *msg;
    } bad[] = {
        {"{\"role\": \"user\"}", ERR_INVALID, "messages: must be an array"},
        {"[1]", ERR_INVALID, "messages[0]: must be an object"},
        {"[]", ERR_INVALID, "messages: must not be empty"},
        {"[{\"content\": \"hi\"}]", ERR_INVALID, "messages[0].role: missing"},
        {"[{\"role\": 7, \"content\": \"hi\"}]", ERR_INVALID, "messages[0].role: must be a string"},
        {"[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"wizard\", \"content\": \"b\"}]", ERR_INVALID,
         "messages[1].role: unknown role 'wizard'"},
        {"[{\"role\": \"user\"}]", ERR_INVALID, "messages[0].content: missing"},
        {"[{\"role\": \"user\", \"content\": 5}]", ERR_INVALID, "messages[0].content: must be a string or an array"},
        {"[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]", ERR_UNSUPPORTED,
         "messages[0].content[0].type: 'image_url'"},
        {"[{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]", ERR_INVALID, "messages[0].content[0].text"},
        {"[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": {}}]", ERR_INVALID, "messages[0].tool_calls: must be an array"},
        {"[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"arguments\": \"{}\"}}]}]", ERR_INVALID,
         "messages[0].tool_calls[0].function.name"},
        {"[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": 3}}]}]", ERR_INVALID,
         "messages[0].tool_calls[0].function.arguments"},
        {"[{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]", ERR_INVALID, "only assistant messages"},
        {"[{\"role\": \"tool\", \"content\": \"x\", \"tool_call_id\": 5}]", ERR_INVALID, "messages[0].tool_call_id: must be a string"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *out = (char *)1;
        err_t e = {0};
        int rc = render_json(NULL, bad[i].messages, NULL, &out, &e);
        CHECK_MSG(rc == bad[i].code && strstr(e.msg, bad[i].msg) != NULL, "case %zu: rc %d, \"%s\" (want \"%s\")", i, rc,
                  e.msg, bad[i].msg);
        CHECK(out == NULL);
    }
    /* tools must be an array, extra an object */
    char *out;
    err_t e = {0};
    json_t *tools = json_string("nope");
    chat_opts o = {.tools = tools};
    CHECK_EQ_INT(render_json(NULL, "[]", &o, &out, &e), ERR_INVALID);
    CHECK(strstr(e.msg, "tools") != NULL);
    json_decref(tools);

    /* accepted: developer role renders as system; assistant without content */
    chat_opts g = {.add_generation_prompt = false};
    CHECK_EQ_INT(render_json("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}",
                             "[{\"role\": \"developer\", \"content\": \"d\"}, {\"role\": \"assistant\"}]", &g, &out, &e),
                 0);
    CHECK_STR(out, "[system:d][assistant:]");
    free(out);

    /* null assistant content reaches the template as none (as in
     * transformers), unless the template fails on that: then as "" */
    const char *nulls = "[{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": null, "
                        "\"tool_calls\": [{\"id\": \"1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}]";
    CHECK_EQ_INT(render_json("{% for m in messages %}{% if m.content is not none %}[{{ m.content }}]{% else %}<null>{% endif %}{% endfor %}",
                             nulls, &g, &out, &e),
                 0);
    CHECK_STR(out, "[u]<null>");
    free(out);
    CHECK_EQ_INT(render_json("{% for m in messages %}[{{ m.content + '!' }}]{% endfor %}", nulls, &g, &out, &e), 0);
    CHECK_STR(out, "[u!][!]");
    free(out);
    /* a template error that has nothing to do with null content is reported */
    CHECK_EQ_INT(render_json("{% for m in messages %}{{ m.content + 1 }}{% endfor %}", nulls, &g, &out, &e), ERR_INVALID);
    CHECK(out == NULL);
    CHECK_MSG(strstr(e.msg, "unsupported operand types for +: string and int") != NULL, "%s", e.msg);

    /* the caller's JSON is not modified by normalisation */
    json_error_t je;
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]", 0, &je);
    chat_tmpl *t;
    chat_tmpl_new("{{ messages[0].content }}", &t, &e);
    CHECK_EQ_INT(chat_render(t, m, NULL, &out, &e), 0);
    CHECK_STR(out, "a\nb");
    free(out);
    CHECK(json_is_array(json_object_get(json_array_get(m, 0), "content")));
    /* extra variables cannot override messages or tokens */
    json_t *extra = json_pack("{s:s, s:s, s:b}", "messages", "evil", "bos_token", "X", "flag", 1);
    chat_opts x = {.extra = extra};
    chat_tmpl_free(t);
    chat_tmpl_new("{{ messages | length }}{{ bos_token }}{{ flag }}", &t, &e);
    CHECK_EQ_INT(chat_render(t, m, &x, &out, &e), 0);
    CHECK_STR(out, "1True");
    free(out);
    json_decref(extra);
    json_decref(m);
    chat_tmpl_free(t);

    /* a NUL inside a string would truncate the prompt: refused */
    {
        json_t *nm = json_pack("[{s:s, s:s%}]", "role", "user", "content", "a\0b", (size_t)3);
        chat_tmpl *nt;
        chat_tmpl_new(NULL, &nt, &e);
        out = (char *)1;
        CHECK_EQ_INT(chat_render(nt, nm, NULL, &out, &e), ERR_INVALID);
        CHECK(out == NULL);
        CHECK(strstr(e.msg, "NUL") != NULL);
        chat_tmpl_free(nt);
        json_decref(nm);
    }

    /* a runtime template error is reported, not a crash */
    CHECK_EQ_INT(render_json("{{ messages[0].content + 1 }}", "[{\"role\": \"user\", \"content\": \"a\"}]", NULL, &out, &e),
                 ERR_INVALID);
    CHECK_MSG(strstr(e.msg, "chat template") && strstr(e.msg, "1:"), "%s", e.msg);
}

/* chat_tmpl_one_call: Llama 3.1/3.2's templates raise on two calls in a
 * message (and render one); the others and the ChatML fallback take both. */
static void test_one_call(void) {
    static const struct {
        const char *file;
        bool one;
    } cases[] = {{"llama31.jinja", true}, {"llama32.jinja", true},  {"qwen3.jinja", false}, {"smollm2.jinja", false},
                 {"gpt-oss.jinja", false}, {"mistral-v03.jinja", false}, {NULL, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], *src = NULL;
        if (cases[i].file) {
            snprintf(path, sizeof path, FIX "%s", cases[i].file);
            src = read_text(path);
            CHECK_MSG(src != NULL, "one call: %s", path);
            if (!src) continue;
        }
        chat_tmpl *t = NULL;
        err_t e = {0};
        CHECK_EQ_INT(chat_tmpl_new(src, &t, &e), 0);
        CHECK_MSG(chat_tmpl_one_call(t) == cases[i].one, "one call: %s: %d, want %d",
                  cases[i].file ? cases[i].file : "(ChatML fallback)", chat_tmpl_one_call(t), cases[i].one);
        chat_tmpl_free(t);
        free(src);
    }
}

int main(void) {
    run_cases();
    test_one_call();
    test_fallback_reasons();
    test_validation();
    return test_summary("test_chat");
}
