/*
 * test_jinja.c — the Jinja-subset engine: every case of
 * tests/fixtures/templates/jinja_cases.json (expected outputs written by
 * hand; check_expected.py confirmed them against Jinja2 configured as
 * Hugging Face does), the error messages of unsupported or malformed
 * templates (with line:column), and the rendering caps: runaway loops,
 * recursion, output and memory never hang or crash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "chat/jinja.h"

static int render_str(const char *src, const char *ctx_json, char **out, err_t *e) {
    jinja_tmpl *t;
    int rc = jinja_parse(src, strlen(src), &t, e);
    if (rc) return rc;
    json_t *ctx = NULL;
    if (ctx_json) {
        json_error_t je;
        ctx = json_loads(ctx_json, 0, &je);
        if (!ctx) fprintf(stderr, "bad test JSON: %s\n", je.text);
    }
    rc = jinja_render(t, ctx, out, NULL, e);
    json_decref(ctx);
    jinja_free(t);
    return rc;
}

static void run_cases(void) {
    json_error_t je;
    json_t *spec = json_load_file("tests/fixtures/templates/jinja_cases.json", 0, &je);
    CHECK_MSG(spec != NULL, "jinja_cases.json: %s", je.text);
    if (!spec) return;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, "cases"), i, c) {
        const char *src = json_string_value(json_object_get(c, "t"));
        const char *date = json_string_value(json_object_get(c, "env_date"));
        if (date) setenv("KVLOOM_FIXED_DATE", date, 1);
        else unsetenv("KVLOOM_FIXED_DATE");
        jinja_tmpl *t = NULL;
        err_t e = {0};
        int prc = jinja_parse(src, strlen(src), &t, &e);
        const char *want_err = json_string_value(json_object_get(c, "err"));
        if (want_err) {
            const char *phase = json_string_value(json_object_get(c, "phase"));
            const char *code = json_string_value(json_object_get(c, "code"));
            int rc = prc;
            char *out = NULL;
            if (!prc) {
                CHECK_MSG(strcmp(phase, "render") == 0, "case %zu (%s): parsed, expected a parse error", i, src);
                rc = jinja_render(t, json_object_get(c, "ctx"), &out, NULL, &e);
                CHECK(out == NULL);
            } else {
                CHECK_MSG(strcmp(phase, "parse") == 0, "case %zu (%s): parse error %s", i, src, e.msg);
            }
            CHECK_MSG(rc < 0 && strstr(e.msg, want_err) != NULL, "case %zu (%s): rc %d \"%s\", want \"%s\"", i, src, rc, e.msg,
                      want_err);
            if (code && strcmp(code, "unsupported") == 0) CHECK_EQ_INT(rc, ERR_UNSUPPORTED);
            free(out);
        } else {
            CHECK_MSG(prc == 0, "case %zu (%s): %s", i, src, e.msg);
            if (prc == 0) {
                char *out = NULL;
                size_t len = 0;
                int rc = jinja_render(t, json_object_get(c, "ctx"), &out, &len, &e);
                const char *want = json_string_value(json_object_get(c, "out"));
                CHECK_MSG(rc == 0 && out && strcmp(out, want) == 0, "case %zu (%s):\n  got  \"%s\"%s%s\n  want \"%s\"", i, src,
                          out ? out : "(null)", rc ? " error: " : "", rc ? e.msg : "", want);
                if (out) CHECK_EQ_INT(len, strlen(out));
                free(out);
            }
        }
        jinja_free(t);
    }
    unsetenv("KVLOOM_FIXED_DATE");
    CHECK(i >= 80);
    json_decref(spec);
}

/* Caps: a hostile template ends with ERR_RANGE, quickly. */
static void test_limits(void) {
    static const char *const runaway[] = {
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
        "{{ 'x' * 1000000000 }}",
        "{% for i in range(1000) %}{{ 'y' * 100000 }}{% endfor %}",
        "{{ range(100000000) | length }}",
        "{% for i in range(3000000) %}{% endfor %}",
        "{{ 9223372036854775807 + 1 }}",
        "{{ 2 ** 64 }}",
    };
    for (size_t i = 0; i < ARRAY_LEN(runaway); i++) {
        char *out = NULL;
        err_t e = {0};
        double t0 = clock_ms();
        int rc = render_str(runaway[i], NULL, &out, &e);
        double ms = clock_ms() - t0;
        CHECK_MSG(rc == ERR_RANGE, "runaway %zu: rc %d (%s)", i, rc, e.msg);
        CHECK_MSG(ms < 20000, "runaway %zu took %.0f ms", i, ms);
        CHECK(out == NULL);
        free(out);
    }
    /* deep nesting is refused by the parser, not a stack overflow */
    size_t depth = 5000;
    char *deep = xmalloc(depth * 2 + 16);
    size_t n = 0;
    n += (size_t)sprintf(deep + n, "{{ ");
    for (size_t i = 0; i < depth; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (size_t i = 0; i < depth; i++) deep[n++] = ')';
    n += (size_t)sprintf(deep + n, " }}");
    jinja_tmpl *t = NULL;
    err_t e = {0};
    CHECK_EQ_INT(jinja_parse(deep, n, &t, &e), ERR_UNSUPPORTED);
    CHECK(strstr(e.msg, "nested too deeply") != NULL);
    CHECK(t == NULL);
    n = 0;
    for (size_t i = 0; i < 1000; i++) n += (size_t)sprintf(deep + n, "{%% if x %%}");
    CHECK(jinja_parse(deep, n, &t, &e) < 0);
    free(deep);
    /* long operator/filter/attribute chains parse iteratively but nest at
     * render time: the evaluator's recursion cap stops them */
    static const char *const units[] = {"+1", "|trim", ".a", "[0]"};
    for (size_t u = 0; u < ARRAY_LEN(units); u++) {
        size_t reps = 20000, ul = strlen(units[u]);
        char *chain = xmalloc(reps * ul + 16);
        n = (size_t)sprintf(chain, "{{ 1");
        for (size_t i = 0; i < reps; i++) {
            memcpy(chain + n, units[u], ul);
            n += ul;
        }
        n += (size_t)sprintf(chain + n, " }}");
        char *o = NULL;
        int rc = jinja_parse(chain, n, &t, &e);
        CHECK_MSG(rc == 0, "chain %s: %s", units[u], e.msg);
        if (!rc) {
            CHECK_EQ_INT(jinja_render(t, NULL, &o, NULL, &e), ERR_RANGE);
            CHECK_MSG(strstr(e.msg, "deep") != NULL, "%s", e.msg);
            jinja_free(t);
        }
        free(o);
        free(chain);
    }
    /* many not-nested iterations within the cap are fine */
    char *out = NULL;
    CHECK_EQ_INT(render_str("{% set ns = namespace(n=0) %}{% for i in range(1000) %}{% for j in range(100) %}"
                            "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}",
                            NULL, &out, &e),
                 0);
    CHECK_STR(out, "100000");
    free(out);
}

static void test_api(void) {
    jinja_tmpl *t;
    err_t e = {0};
    char *out;
    size_t len;
    /* an empty template and a NULL context */
    CHECK_EQ_INT(jinja_parse("", 0, &t, &e), 0);
    CHECK_EQ_INT(jinja_render(t, NULL, &out, &len, &e), 0);
    CHECK_STR(out, "");
    CHECK_EQ_INT(len, 0);
    free(out);
    jinja_free(t);
    jinja_free(NULL);
    /* source need not be NUL-terminated; bytes past len are ignored */
    const char src[] = "{{ 'ab' }}XYZ";
    CHECK_EQ_INT(jinja_parse(src, 10, &t, &e), 0);
    CHECK_EQ_INT(jinja_render(t, NULL, &out, NULL, &e), 0);
    CHECK_STR(out, "ab");
    free(out);
    /* the context must be an object */
    json_t *arr = json_array();
    CHECK_EQ_INT(jinja_render(t, arr, &out, NULL, &e), ERR_INVALID);
    json_decref(arr);
    jinja_free(t);
    /* a parsed template renders many times with different contexts */
    CHECK_EQ_INT(jinja_parse("{{ n * 2 }}", 11, &t, &e), 0);
    for (int i = 0; i < 5; i++) {
        json_t *ctx = json_pack("{s:i}", "n", i);
        CHECK_EQ_INT(jinja_render(t, ctx, &out, NULL, &e), 0);
        char want[8];
        snprintf(want, sizeof want, "%d", i * 2);
        CHECK_STR(out, want);
        free(out);
        json_decref(ctx);
    }
    jinja_free(t);
    /* embedded NUL bytes in a value are carried through */
    json_t *ctx = json_pack("{s:s%}", "s", "a\0b", (size_t)3);
    const char *nul_src = "[{{ s }}]{{ s | length }}";
    CHECK_EQ_INT(jinja_parse(nul_src, strlen(nul_src), &t, &e), 0);
    CHECK_EQ_INT(jinja_render(t, ctx, &out, &len, &e), 0);
    CHECK_EQ_INT(len, 6);
    CHECK(out && memcmp(out, "[a\0b]3", 6) == 0);
    free(out);
    json_decref(ctx);
    jinja_free(t);
    /* strftime_now without a fixed date gives the current year */
    unsetenv("KVLOOM_FIXED_DATE");
    CHECK_EQ_INT(render_str("{{ strftime_now('%Y') | int > 2000 }}", NULL, &out, &e), 0);
    CHECK_STR(out, "True");
    free(out);
}

int main(void) {
    run_cases();
    test_limits();
    test_api();
    return test_summary("test_jinja");
}
