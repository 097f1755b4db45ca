/*
 * test_schema.c — JSON Schema to GBNF (src/grammar/schema.c): tables of
 * schemas with JSON texts the compiled grammar must accept and refuse (run
 * through grammar_from_gbnf and gmatch_accept_bytes / gmatch_can_end), the
 * errors that name unsupported and invalid keywords, exhaustive integer
 * ranges, and hostile schemas that must be refused cleanly.
 * The random differential test is tests/grammar_diff_test.sh.
 */
#include <jansson.h>

#include "grammar/grammar.h"
#include "grammar/schema.h"
#include "test.h"

/* Compiles schema text; NULL (and a failed check) when it does not compile. */
static grammar *compile(const char *schema_text) {
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    CHECK_MSG(s != NULL, "bad test schema %s: %s", schema_text, je.text);
    if (!s) return NULL;
    char *buf = NULL;
    size_t len = 0;
    err_t e = {0};
    int rc = schema_to_gbnf(s, "root", &buf, &len, &e);
    json_decref(s);
    CHECK_MSG(rc == 0, "schema %s: %s", schema_text, e.msg);
    grammar *g = NULL;
    if (rc == 0) {
        rc = grammar_from_gbnf(buf, len, &g, &e);
        CHECK_MSG(rc == 0, "GBNF of %s: %s\n%s", schema_text, e.msg, buf);
    }
    free(buf);
    return g;
}

/* A vocabulary of the 256 single bytes (the matcher needs one). */
static int byte_piece(void *ctx, int32_t id, char *buf, int cap) {
    if (cap > 0) buf[0] = (char)id;
    return 1;
}
static gvocab *bytes_vocab;

static grammar *compile_text_ok(const char *buf, size_t len) {
    grammar *g = NULL;
    err_t e = {0};
    int rc = grammar_from_gbnf(buf, len, &g, &e);
    CHECK_MSG(rc == 0, "GBNF: %s", e.msg);
    return g;
}

/* 1 when text is a complete string of g, 0 when only a prefix, -1 refused. */
static int run(grammar *g, const char *text) {
    gmatch *m = gmatch_new(g, bytes_vocab);
    int r = gmatch_accept_bytes(m, text, strlen(text)) ? -1 : gmatch_can_end(m) ? 1 : 0;
    gmatch_free(m);
    return r;
}

typedef struct {
    const char *schema;
    const char *ok[10];  /* complete documents */
    const char *bad[10]; /* neither complete nor (where marked by a leading '!') even a prefix */
} table_row;

static const table_row rows[] = {
    {"{\"type\":\"string\"}",
     {"\"\"", "\"abc\"", "\"a\\\"b\"", "\"\\u00e9\\n\"", "\"日本\"", "\"\\/\""},
     {"!abc", "\"abc", "!\"a\nb\"", "!\"\\x\"", "!\"\\ud800\"", "!\"a\" "}},
    {"{\"type\":\"integer\"}",
     {"0", "-1", "123456789012345", "-7"},
     {"!-0", "!01", "1.0", "!1234567890123456", "!+1", "!1e3"}},
    {"{\"type\":\"number\"}",
     {"0", "-0.5", "1e10", "2.25E-3", "123456789012345.123456789012345", "-0"},
     {"!.5", "1.", "!1.2.3", "!01", "!1e1234", "1e"}},
    {"{\"type\":\"boolean\"}", {"true", "false"}, {"!null", "tru", "!True"}},
    {"{\"type\":\"null\"}", {"null"}, {"!nil", "nul"}},
    {"{\"type\":[\"string\",\"null\"]}", {"null", "\"x\""}, {"!1", "!true"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}",
     {"{\"b\": \"x\"}", "{\"a\": 1, \"b\": \"x\"}"},
     {"!{\"b\": \"x\", \"a\": 1}", "!{\"a\":1,\"b\":\"x\"}", "{\"a\": 1}", "!{}", "!{\"b\": \"x\", \"c\": 1}",
      "!{ \"b\": \"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
     {"{}", "{\"a\": 1}", "{\"a\": 1, \"c\": true}", "{\"zz\": false, \"y\": true}", "{\"ab\": true}", "{\"\": true}"},
     {"!{\"a\": true}", "!{\"c\": 1}", "!{\"c\": true, \"a\": 1}", "!{\"\\u0061\": true}"}},
    {"{\"type\":\"object\"}", {"{}", "{\"x\": [1, {\"y\": null}]}", "{\"a\": 1, \"a\": 2}"}, {"!{\"x\":1}", "!{,}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},\"additionalProperties\":false}",
     {"{}", "{\"a\": null}"},
     {"!{\"b\": null}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":false},\"additionalProperties\":true}",
     {"{}", "{\"c\": 1}", "{\"bb\": 1}"},
     {"!{\"b\": 1}", "!{\"a\": 1}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
     {"[1]", "[1, 2, 3]"},
     {"[]", "![1, 2, 3, 4]", "![1,2]", "![\"a\"]", "![1, ]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
     {"[]", "[\"a\"]", "[\"a\", 1]"},
     {"![1]", "![\"a\", 1, 2]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
     {"[\"a\", true]", "[\"a\", true, false]"},
     {"[\"a\"]", "![true]", "![\"a\", \"b\"]"}},
    {"{\"enum\":[\"red\",1,null,[1,{\"a\":\"é\"}],1.5]}",
     {"\"red\"", "1", "null", "[1, {\"a\": \"é\"}]", "1.5"},
     {"!\"blue\"", "!2", "![1,{\"a\":\"é\"}]", "!1.50"}},
    {"{\"const\":{\"k\":\"q\\\"\\n\"}}", {"{\"k\": \"q\\\"\\n\"}"}, {"!{\"k\": \"q\\u0022\\n\"}"}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}", {"\"a\"", "\"b\""}, {"!1"}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"abc\"", "\"\\u00e9\\n\"", "\"日本\""},
     {"\"a\"", "!\"abcd\"", "!\"\\n\\n\\n\\n\""}},
    /* issue 22: number bounds, formats, objects, arrays, combinations */
    /* format beside pattern: the narrower one is enforced (regex_subset) */
    /* several patternProperties: one alternative per set of patterns a key matches */
    {"{\"type\":\"object\",\"patternProperties\":{\"a\":{},\"b\":{}}}", {"{\"a\": 1, \"xb\": 2, \"ab\": 3}", "{}"}, {"{\"c\": 1}"}},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"string\"},\"^[a-z]+$\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
     {"{\"x-a\": \"s\", \"abc\": 1}", "{\"x\": 1}"}, {"!{\"x-a\": 1}", "!{\"ABC\": 1}"}},
    {"{\"type\":\"object\",\"patternProperties\":{\"^a\":{\"type\":\"integer\"},\"b$\":{\"minimum\":5}}}",
     {"{\"ab\": 7}", "{\"a\": 1}", "{\"b\": 6.5}"}, {"!{\"ab\": 1.5}", "{\"b\": 2}"}},
    {"{\"type\":\"object\",\"patternProperties\":{\"^n_\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
     {"{\"n_a\": 1, \"x\": \"s\"}", "{}"}, {"!{\"n_a\": \"s\"}", "!{\"x\": 1}"}},
    /* negation (issue 22): if/then/else, not, dependentSchemas / dependencies,
     * dependentRequired on optional triggers, contains counts, uniqueItems */
    {"{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":\"integer\"},\"y\":{\"type\":\"string\"}},\"required\":[\"kind\"],\"if\":{\"properties\":{\"kind\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},\"else\":{\"required\":[\"y\"]}}",
     {"{\"kind\": \"a\", \"x\": 1}", "{\"kind\": \"a\", \"x\": 1, \"y\": \"s\"}", "{\"kind\": \"b\", \"y\": \"s\"}"},
     {"!{\"kind\": \"a\", \"y\": \"s\"}", "{\"kind\": \"b\", \"x\": 1}", "!{\"kind\": \"c\"}"}},
    {"{\"if\":{\"type\":\"string\"},\"then\":{\"minLength\":1}}", {"\"a\"", "1", "null", "[]"}, {"!\"\""}},
    {"{\"type\":\"number\",\"not\":{\"minimum\":1}}", {"0.5", "-3", "0"}, {"!1", "!2.5"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"not\":{\"required\":[\"a\"]}}",
     {"{}", "{\"b\": 1}"}, {"!{\"a\": 1}"}},
    {"{\"type\":\"string\",\"not\":{\"enum\":[\"no\",\"a.b\"]}}", {"\"yes\"", "\"a\"", "\"ab\"", "\"no!\"", "\"\""}, {"\"no\"", "\"a.b\""}},
    {"{\"not\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"object\"}]}}", {"1", "[]", "null", "true"}, {"!\"a\"", "!{}"}},
    {"{\"type\":\"integer\",\"not\":{\"allOf\":[{\"minimum\":3},{\"maximum\":5}]}}", {"2", "6", "-1"}, {"3", "4", "5"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"dependentSchemas\":{\"a\":{\"required\":[\"b\"]}}}",
     {"{}", "{\"b\": 1}", "{\"a\": 1, \"b\": 2}"}, {"{\"a\": 1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"dependencies\":{\"a\":[\"b\"]}}",
     {"{}", "{\"b\": 1}", "{\"a\": 1, \"b\": 2}"}, {"{\"a\": 1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"dependentRequired\":{\"a\":[\"b\"]}}",
     {"{}", "{\"b\": 1}", "{\"a\": 1, \"b\": 2}"}, {"{\"a\": 1}"}},
    {"{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\",\"z\"]},\"uniqueItems\":true,\"maxItems\":2}",
     {"[]", "[\"x\"]", "[\"x\", \"z\"]", "[\"y\", \"z\"]"}, {"![\"x\", \"x\"]", "![\"x\", \"y\", \"z\"]", "![\"z\", \"x\"]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"uniqueItems\":true,\"minItems\":2}", {"[false, true]"}, {"![true, true]", "[false]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":10},\"minContains\":2,\"maxContains\":3}",
     {"[10, 11]", "[1, 10, 2, 20]", "[10, 10, 10]"}, {"[10]", "![10, 10, 10, 10]", "[1, 2]"}},
    {"{\"type\":\"array\",\"contains\":{\"const\":\"x\"},\"maxItems\":2}", {"[\"x\"]", "[1, \"x\"]", "[\"x\", \"x\"]"}, {"[1]", "![1, 2]"}},
    {"{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"contains\":{\"const\":\"a\"},\"minContains\":0,\"maxContains\":1}",
     {"[]", "[\"b\", \"b\"]", "[\"a\", \"b\"]"}, {"![\"a\", \"a\"]"}},
    /* lookaheads anywhere, anchors per top-level branch, and a format with a
     * pattern neither includes: their intersection as an automaton (zod 4) */
    {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", {"\"a\"", "\"xab\""}, {"\"b\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(?!ab)[a-c]{2}$\"}", {"\"aa\"", "\"ba\"", "\"ac\""}, {"!\"ab\"", "!\"abc\""}},
    {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", {"\"a\"", "\"abc\"", "\"xb\"", "\"b\""}, {"\"ba\"", "\"x\""}},
    {"{\"type\":\"string\",\"pattern\":\"a+b\",\"maxLength\":3}", {"\"ab\"", "\"aab\"", "\"xab\""}, {"!\"aaab\"", "\"a\""}},
    {"{\"type\":\"string\",\"pattern\":\"^$|^(?:[0-9a-zA-Z+/]{4})*(?:(?:[0-9a-zA-Z+/]{2}==)|(?:[0-9a-zA-Z+/]{3}=))?$\"}",
     {"\"\"", "\"QUJD\"", "\"QUI=\"", "\"QQ==\""}, {"\"QUJ\"", "!\"Q===\""}},
    {"{\"type\":\"string\",\"format\":\"duration\",\"pattern\":\"^P(?:(\\\\d+W)|(?!.*W)(?=\\\\d|T\\\\d)(\\\\d+Y)?(\\\\d+M)?(\\\\d+D)?(T(?=\\\\d)(\\\\d+H)?(\\\\d+M)?(\\\\d+([.,]\\\\d+)?S)?)?)$\"}",
     {"\"P1D\"", "\"PT1H\"", "\"P2W\"", "\"P1Y2M3DT4H5M6S\""}, {"\"P\"", "\"PT\"", "!\"P1W1D\"", "!\"P1.\"", "!\"PT1.5S\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\",\"pattern\":\"^(?:(?:\\\\d\\\\d[2468][048]|\\\\d\\\\d[13579][26]|\\\\d\\\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\\\d|30)|(?:02)-(?:0[1-9]|1\\\\d|2[0-8])))T(?:(?:[01]\\\\d|2[0-3]):[0-5]\\\\d:[0-5]\\\\d(?:\\\\.\\\\d+)?(?:Z))$\"}",
     {"\"2024-02-29T12:00:00Z\"", "\"2024-01-01T00:00:00.123Z\""},
     {"!\"2023-02-29T12:00:00Z\"", "!\"2024-01-01T00:00:00+01:00\"", "!\"2024-01-01T00:00:00.1234567890Z\""}},
    {"{\"type\":\"string\",\"format\":\"hostname\",\"pattern\":\"^(?=.{1,253}\\\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\\\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]{0,61}[0-9a-zA-Z])?)*\\\\.?$\"}",
     {"\"example.com\"", "\"a\""}, {"!\"-a\"", "\"a-\"", "!\"a..b\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$\"}",
     {"\"123e4567-e89b-42d3-a456-426614174000\""}, {"!\"123E4567-e89b-42d3-a456-426614174000\"", "!\"123e4567-e89b-12d3-a456-426614174000\""}},
    {"{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"^(?!\\\\.)(?!.*\\\\.\\\\.)([A-Za-z0-9_'+\\\\-\\\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\\\-]*\\\\.)+[A-Za-z]{2,}$\"}",
     {"\"a.b@ex.com\""}, {"!\".a@ex.com\"", "!\"a..b@ex.com\""}},
    {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^\\\\d{4}-\\\\d{2}-\\\\d{2}$\"}", {"\"2024-02-29\""}, {"!\"2023-02-29\""}},
    {"{\"type\":\"number\",\"minimum\":0}", {"0", "0.5", "12", "999999999.5"}, {"!-1", "!-0.5", "!1e3"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1.5}",
     {"0.1", "1", "1.5", "1.25", "0.000001"},
     {"0", "0.0", "!1.51", "!2", "!-0.1"}},
    {"{\"type\":\"number\",\"minimum\":-2.5,\"exclusiveMaximum\":-1}",
     {"-2.5", "-2", "-1.01", "-2.49"},
     {"-1", "!-2.51", "!-3", "!0", "-1.0"}},
    {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}", {"0", "1.25", "3.1"}, {"!1.255", "!-1"}},
    {"{\"type\":\"integer\",\"multipleOf\":5}", {"0", "5", "-15", "100", "12345"}, {"3", "-7", "12", "!1.5"}},
    {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":1,\"maximum\":30}", {"7", "14", "28"}, {"!0", "!35", "!8"}},
    {"{\"type\":\"string\",\"format\":\"date\"}",
     {"\"2024-02-29\"", "\"2023-12-31\"", "\"2000-02-29\"", "\"2023-04-30\""},
     {"!\"2023-02-29\"", "!\"1900-02-29\"", "!\"2023-04-31\"", "!\"2023-13-01\""}},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"1.2.3.4\"", "\"255.255.255.255\"", "\"0.0.0.0\""},
     {"!\"256.1.1.1\"", "!\"01.1.1.1\"", "\"1.2.3\""}},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", {"\"::1\"", "\"fe80::1:2\"", "\"1:2:3:4:5:6:7:8\"", "\"::\"",
     "\"::ffff:1.2.3.4\""}, {"!\":::\"", "!\"1:2:3:4:5:6:7:8:9\"", "!\"g::\""}},
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@example.com\"", "\"x_y+z@a-b.c.io\""},
     {"!\"@example.com\"", "!\"a..b@x.io\"", "\"a@b\"", "!\"a@-b.io\""}},
    {"{\"type\":\"string\",\"format\":\"uri\"}", {"\"https://example.com/a/b?q=1#f\"", "\"urn:isbn:123\"",
     "\"mailto:a@b.c\"", "\"http://h:80/\""}, {"!\"://x\"", "!\"1http://x\"", "!\"http://a b\""}},
    {"{\"type\":\"string\",\"format\":\"duration\"}", {"\"P1Y2M3D\"", "\"PT1H30M\"", "\"P2W\"", "\"P1DT2S\""},
     {"!\"P1Y2D\"", "\"P\"", "!\"P1H\"", "\"PT\""}},
    {"{\"type\":\"string\",\"format\":\"hostname\"}", {"\"example.com\"", "\"a-b.c\"", "\"localhost\""},
     {"!\"-a.com\"", "!\"a..b\"", "!\"a_b\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\",\"maxLength\":36}", {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"!\"123e4567e89b12d3a456426614174000\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}", {"\"a\"", "\"abc\""}, {"!\"abcd\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"ab\",\"maxLength\":4}", {"\"ab\"", "\"abxy\""}, {"!\"abxyz\"", "\"a\""}},
    {"{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"a\",\"b\"]},\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{}", "{\"a\": 1}", "{\"a\": 1, \"b\": 2}"}, {"!{\"c\": 1}", "!{\"a\": true}"}},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x-[a-z]+$\":{\"type\":\"string\"}}}",
     {"{}", "{\"x-a\": \"1\"}", "{\"x-a\": \"1\", \"x-bc\": \"2\"}"}, {"!{\"y\": \"1\"}", "!{\"x-a\": 1}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"null\"},\"minProperties\":1,\"maxProperties\":2}",
     {"{\"a\": null}", "{\"a\": null, \"b\": null}"}, {"{}", "!{\"a\": null, \"b\": null, \"c\": null}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"null\"}},\"required\":[\"a\"],"
     "\"dependentRequired\":{\"a\":[\"b\"]}}",
     {"{\"a\": null, \"b\": null}"}, {"{\"a\": null}"}},
    {"{\"type\":\"array\",\"items\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"additionalItems\":false}",
     {"[]", "[\"a\"]", "[\"a\", 1]"}, {"![1]", "![\"a\", 1, 2]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"const\":3}}",
     {"[3]", "[1, 3]", "[3, 1, 2]"}, {"[]", "[1, 2]", "![\"a\"]"}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
     "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
     {"{\"a\": 1, \"b\": \"x\"}"}, {"{\"a\": 1}", "!{\"b\": \"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}},\"anyOf\":[{\"required\":[\"k\"]}]}",
     {"{\"k\": \"v\"}"}, {"!{}"}},
    {"{\"$defs\":{\"b\":{\"properties\":{\"x\":{\"type\":\"null\"}}}},\"$ref\":\"#/$defs/b\",\"required\":[\"x\"]}",
     {"{\"x\": null}"}, {"!{}"}},
    {"{\"$defs\":{\"n\":{\"$anchor\":\"node\",\"type\":\"array\",\"items\":{\"$ref\":\"#node\"}}},\"$ref\":\"#node\"}",
     {"[]", "[[], [[]]]"}, {"!{}"}},
    {"{\"type\":[\"string\",\"null\",\"integer\"],\"not\":{\"type\":\"null\"}}", {"\"a\"", "1"}, {"!null"}},
    {"{\"type\":\"string\",\"nullable\":true}", {"\"a\"", "null"}, {"!1"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}},\"additionalProperties\":true}", {"{}", "{\"b\": 1}"},
     {"!{\"a\": 1}"}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+-\\\\d{2}$\"}",
     {"\"ab-12\"", "\"x-00\""},
     {"!\"AB-12\"", "!\"ab-123\"", "\"ab-1\"", "!\"-12\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(foo|ba[rz])(?:\\\\.x)?$\"}",
     {"\"foo\"", "\"baz\"", "\"bar.x\""},
     {"!\"fob\"", "!\"foo.y\""}},
    {"{\"type\":\"string\",\"pattern\":\"a\\\"b\"}",
     {"\"a\\\"b\"", "\"xxa\\\"byy\""},
     {"\"ab\"", "!\"a\\u0022b\""}},
    {"{\"type\":\"string\",\"pattern\":\"^.$\"}", {"\"x\"", "\"é\"", "\"\\t\"", "\"\\\"\""}, {"!\"\\n\"", "!\"ab\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[^a]\\\\s\\\\w?$\"}",
     {"\"b \"", "\"\\n\\t_\"", "\"\\u0001 \""},
     {"!\"a \"", "!\"bb\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}",
     {"\"2024-02-29\"", "\"0000-12-31\""},
     {"!\"2024-13-01\"", "!\"2024-00-10\"", "!\"2024-01-32\"", "!\"24-01-01\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}",
     {"\"23:59:59Z\"", "\"00:00:00.123+05:30\""},
     {"!\"24:00:00Z\"", "\"12:00:00\"", "!\"12:60:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-01-02T03:04:05-01:00\""}, {"!\"2024-01-02 03:04:05Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}",
     {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEF00-0000-0000-0000-000000000000\""},
     {"!\"123e4567e89b12d3a456426614174000\"", "!\"123e4567-e89b-12d3-a456-42661417400g\""}},
    {"{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},{\"type\":\"string\",\"maxLength\":1}]}",
     {"5", "\"\"", "\"x\""},
     {"!10", "!\"xy\""}},
    {"{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"boolean\"}],\"title\":\"t\"}", {"null", "true"}, {"!0"}},
    {"{\"allOf\":[{\"type\":\"boolean\"}],\"description\":\"d\"}", {"false"}, {"!null"}},
    {"{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pos\"}}",
     {"[]", "[1, 9]"},
     {"![0]", "![10]"}},
    {"{\"definitions\":{\"t\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/t\"}}},\"required\":[\"k\"]}},\"$ref\":\"#/definitions/t\"}",
     {"{\"k\": []}", "{\"k\": [{\"k\": []}, {\"k\": [{\"k\": []}]}]}"},
     {"!{\"k\": [1]}", "{\"k\": [{\"k\": []}"}},
    {"{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"}}}",
     {"{}", "{\"next\": {\"next\": {}}}"},
     {"!{\"next\": 1}"}},
    {"{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"description\":\"d\",\"default\":\"a\",\"examples\":[\"b\"]}},\"required\":[\"x\"],\"additionalProperties\":false}",
     {"{\"x\": \"\"}"},
     {"!{\"x\": 1}"}},
    {"true", {"1", "\"a\"", "[1, [2, {}]]", "{\"a\": null}"}, {"![1,2]", "!{\"a\":1}", "! 1"}},
    {"{\"properties\":{\"a\":{\"type\":\"integer\"}}}", {"{\"a\": 1}", "{}"}, {"!1", "!\"a\""}},
    {"{\"minLength\":1}", {"\"a\""}, {"!1", "\"\""}},
};

static void check_rows(void) {
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        grammar *g = compile(rows[i].schema);
        if (!g) continue;
        for (int k = 0; k < 10 && rows[i].ok[k]; k++)
            CHECK_MSG(run(g, rows[i].ok[k]) == 1, "schema %s should accept %s (got %d)", rows[i].schema,
                      rows[i].ok[k], run(g, rows[i].ok[k]));
        for (int k = 0; k < 10 && rows[i].bad[k]; k++) {
            const char *t = rows[i].bad[k];
            bool not_prefix = t[0] == '!';
            if (not_prefix) t++;
            int r = run(g, t);
            CHECK_MSG(not_prefix ? r == -1 : r != 1, "schema %s should refuse %s%s (got %d)", rows[i].schema, t,
                      not_prefix ? " as a prefix" : "", r);
        }
        grammar_unref(g);
    }
}

/* Integer ranges: every integer near the bounds, exactly. */
static void check_int_ranges(void) {
    static const long long b[][2] = {{0, 255},    {-5, 100},  {-100, -5}, {1, 1},     {-1, 0},      {7, 1234},
                                     {10, 99},    {19, 21},   {0, 0},     {-999, 999}, {100, 1000}, {-1000, -1},
                                     {123, 4567}, {-77, -70}, {9, 10},    {0, 9},     {99, 101},    {-10, 10}};
    for (size_t i = 0; i < ARRAY_LEN(b); i++) {
        char schema[160];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", b[i][0], b[i][1]);
        grammar *g = compile(schema);
        if (!g) continue;
        int bad = 0;
        for (long long x = b[i][0] - 120; x <= b[i][1] + 120; x++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", x);
            bool in = x >= b[i][0] && x <= b[i][1];
            if ((run(g, t) == 1) != in) {
                if (bad++ < 3) CHECK_MSG(0, "%s: %s %s", schema, t, in ? "refused" : "accepted");
            }
        }
        CHECK_MSG(bad == 0, "%s: %d wrong", schema, bad);
        CHECK_MSG(run(g, "-0") != 1 && run(g, "00") != 1, "%s: -0 or 00 accepted", schema);
        grammar_unref(g);
    }
    /* exclusive bounds, real bounds, draft-4 booleans, one-sided bounds */
    struct {
        const char *schema;
        long long lo, hi;
    } ex[] = {
        {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", 1, 9},
        {"{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":9.5}", 1, 9},
        {"{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":5,\"exclusiveMaximum\":true}", 1, 4},
        {"{\"type\":\"integer\",\"minimum\":-3}", -3, 999999999999999LL},
        {"{\"type\":\"integer\",\"maximum\":3}", -999999999999999LL, 3},
        {"{\"type\":\"integer\",\"minimum\":9223372036854775800}", 9223372036854775800LL, 9223372036854775807LL},
    };
    for (size_t i = 0; i < ARRAY_LEN(ex); i++) {
        grammar *g = compile(ex[i].schema);
        if (!g) continue;
        static const int d[] = {-1, 0, 1, -1, 0, 1};
        for (size_t k = 0; k < ARRAY_LEN(d); k++) {
            long long x;
            if (__builtin_add_overflow(k < 3 ? ex[i].lo : ex[i].hi, d[k], &x)) continue;
            char t[32];
            snprintf(t, sizeof t, "%lld", x);
            bool in = x >= ex[i].lo && x <= ex[i].hi;
            CHECK_MSG((run(g, t) == 1) == in, "%s: %s should be %s", ex[i].schema, t, in ? "accepted" : "refused");
        }
        grammar_unref(g);
    }
}

typedef struct {
    const char *schema;
    int code;
    const char *msg; /* a substring of the message */
} err_row;

static const err_row errs[] = {
    {"{\"type\":\"object\",\"patternProperties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{},\"e\":{}}}", ERR_UNSUPPORTED, "/patternProperties"},
    {"{\"type\":\"object\",\"properties\":{\"k\":{}},\"patternProperties\":{\"a\":{}}}", ERR_UNSUPPORTED, "/patternProperties"},
    {"{\"properties\":{\"x\":{\"type\":\"string\",\"frobnicate\":\"a\"}}}", ERR_UNSUPPORTED,
     "'frobnicate' at /properties/x"},
    {"{\"properties\":{\"a/b\":{\"multipleOf\":0.3}}}", ERR_UNSUPPORTED, "/properties/a~1b/multipleOf"},
    {"{\"type\":\"integer\",\"minimum\":0,\"multipleOf\":3}", ERR_UNSUPPORTED, "/multipleOf"},
    {"{\"type\":\"number\",\"minimum\":2,\"exclusiveMaximum\":2}", ERR_INVALID, "no number"},
    {"{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}", ERR_UNSUPPORTED, "no string satisfies the pattern, format"},
    {"{\"type\":\"string\",\"pattern\":\"^a(?!b)b\"}", ERR_INVALID, "/pattern: no string matches it"},
    {"{\"type\":\"string\",\"pattern\":\"(?=(?=a))\"}", ERR_UNSUPPORTED, "/pattern"},
    {"{\"type\":\"string\",\"pattern\":\"(?<=a)\"}", ERR_UNSUPPORTED, "/pattern"},
    {"{\"type\":\"array\",\"uniqueItems\":true}", ERR_UNSUPPORTED, "/uniqueItems: enforced for items of finitely many"},
    {"{\"if\":{\"pattern\":\"a\"},\"then\":{\"minLength\":1}}", ERR_UNSUPPORTED, "if/then/else"},
    {"{\"not\":{\"pattern\":\"a\"}}", ERR_UNSUPPORTED, "/not"},
    {"{\"type\":\"string\",\"pattern\":\"b\",\"not\":{\"const\":\"a\"}}", ERR_UNSUPPORTED, "/not"},
    {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}", ERR_UNSUPPORTED, "/uniqueItems"},
    {"{\"type\":\"array\",\"items\":{\"enum\":[1,2]},\"uniqueItems\":true,\"minItems\":3}", ERR_INVALID, "distinct"},
    {"{\"type\":\"array\",\"uniqueItems\":1}", ERR_INVALID, "/uniqueItems must be a boolean"},
    {"{\"type\":\"array\",\"contains\":{\"pattern\":\"a\"},\"maxContains\":1}", ERR_UNSUPPORTED, "/contains"},
    {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", ERR_UNSUPPORTED, "'pattern' at / cannot be enforced"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"propertyNames\":{\"maxLength\":3}}", ERR_UNSUPPORTED, "/propertyNames"},
    {"{\"type\":\"number\",\"minimum\":1e300}", ERR_UNSUPPORTED, "/minimum"},
    {"{\"type\":\"string\",\"format\":\"regex\"}", ERR_UNSUPPORTED, "format 'regex'"},
    {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", ERR_UNSUPPORTED, "/pattern"},
    {"{\"type\":\"string\",\"pattern\":\"(a*)*\"}", ERR_UNSUPPORTED, "/pattern"},
    {"{\"type\":\"string\",\"pattern\":\"[b-a]\"}", ERR_INVALID, "/pattern"},
    {"{\"type\":\"string\",\"pattern\":\"(ab\"}", ERR_INVALID, "/pattern"},
    {"{\"type\":\"string\",\"pattern\":\"a+b\",\"maxLength\":1}", ERR_UNSUPPORTED, "no string satisfies"},
    {"{\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":-1}}}", ERR_INVALID,
     "/properties/city/maxLength must be a non-negative integer"},
    {"{\"type\":\"strin\"}", ERR_INVALID, "/type"},
    {"{\"type\":[]}", ERR_INVALID, "/type"},
    {"{\"required\":\"a\"}", ERR_INVALID, "/required"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", ERR_INVALID, "no integer"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", ERR_INVALID, "minItems"},
    {"{\"enum\":[]}", ERR_INVALID, "enum"},
    {"{\"type\":\"string\",\"enum\":[1,2]}", ERR_INVALID, "enum"},
    {"{\"$ref\":\"#/$defs/nope\"}", ERR_INVALID, "/$ref"},
    {"{\"$ref\":\"http://example.com/s.json\"}", ERR_UNSUPPORTED, "/$ref"},
    {"{\"$ref\":\"#\"}", ERR_INVALID, "refers back to itself"},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", ERR_INVALID, "refers back to itself"},
    {"{\"$ref\":\"#/$defs/a\",\"type\":\"object\"}", ERR_INVALID, "cannot resolve"},
    {"{\"anyOf\":[{}],\"oneOf\":[{}]}", ERR_UNSUPPORTED, "anyOf together with oneOf"},
    {"false", ERR_UNSUPPORTED, "false"},
    {"[1]", ERR_INVALID, "must be a schema"},
    {"{\"properties\":{\"a\":false},\"required\":[\"a\"]}", ERR_INVALID, "/required"},
    {"{\"properties\":{},\"required\":[\"a\"],\"additionalProperties\":false}", ERR_INVALID, "/required"},
    {"{\"type\":\"string\",\"maxLength\":100000}", ERR_UNSUPPORTED, "maxLength"},
};

static void check_errors(void) {
    for (size_t i = 0; i < ARRAY_LEN(errs); i++) {
        json_error_t je;
        json_t *s = json_loads(errs[i].schema, JSON_DECODE_ANY, &je);
        CHECK_MSG(s != NULL, "bad test schema %s", errs[i].schema);
        if (!s) continue;
        char *buf = xstrdup("keep ::= \"x\"\n");
        size_t len = strlen(buf);
        err_t e = {0};
        int rc = schema_to_gbnf(s, "root", &buf, &len, &e);
        CHECK_MSG(rc == errs[i].code, "%s: code %d (%s), want %d", errs[i].schema, rc, e.msg, errs[i].code);
        CHECK_MSG(strstr(e.msg, errs[i].msg) != NULL, "%s: message '%s' lacks '%s'", errs[i].schema, e.msg,
                  errs[i].msg);
        CHECK_MSG(len == strlen("keep ::= \"x\"\n") && !strcmp(buf, "keep ::= \"x\"\n"), "%s: buffer changed",
                  errs[i].schema);
        free(buf);
        json_decref(s);
    }
}

/* Hostile inputs: refused with an error, never a crash or a huge grammar. */
static void check_hostile(void) {
    /* deep nesting */
    {
        char *t = xmalloc(40 * 200 + 16);
        size_t n = 0;
        for (int i = 0; i < 200; i++) n += (size_t)sprintf(t + n, "{\"type\":\"array\",\"items\":");
        n += (size_t)sprintf(t + n, "{}");
        for (int i = 0; i < 200; i++) t[n++] = '}';
        t[n] = 0;
        json_t *s = json_loads(t, 0, NULL);
        CHECK(s != NULL);
        char *buf = NULL;
        size_t len = 0;
        err_t e = {0};
        CHECK_EQ_INT(schema_to_gbnf(s, "root", &buf, &len, &e), ERR_RANGE);
        CHECK_MSG(strstr(e.msg, "deeper") != NULL, "%s", e.msg);
        free(buf);
        json_decref(s);
        free(t);
    }
    /* huge enum, and an enum whose text is too large */
    {
        json_t *en = json_array();
        for (int i = 0; i < 5000; i++) json_array_append_new(en, json_integer(i));
        json_t *s = json_pack("{s:o}", "enum", en);
        char *buf = NULL;
        size_t len = 0;
        err_t e = {0};
        CHECK_EQ_INT(schema_to_gbnf(s, "root", &buf, &len, &e), ERR_RANGE);
        json_decref(s);
        en = json_array();
        char *big = xmalloc(300001);
        memset(big, 'a', 300000);
        big[300000] = 0;
        for (int i = 0; i < 5; i++) {
            big[0] = (char)('a' + i);
            json_array_append_new(en, json_string(big));
        }
        s = json_pack("{s:o}", "enum", en);
        CHECK_EQ_INT(schema_to_gbnf(s, "root", &buf, &len, &e), ERR_RANGE);
        CHECK(buf == NULL);
        json_decref(s);
        free(big);
    }
    /* many properties with long names: bounded by the size and rule limits */
    {
        json_t *props = json_object();
        char name[80];
        for (int i = 0; i < 3000; i++) {
            snprintf(name, sizeof name, "property_number_%d_with_a_long_name_to_make_the_trie_big", i);
            json_object_set_new(props, name, json_pack("{s:s}", "type", "string"));
        }
        json_t *s = json_pack("{s:o,s:b}", "properties", props, "additionalProperties", 1);
        char *buf = NULL;
        size_t len = 0;
        err_t e = {0};
        int rc = schema_to_gbnf(s, "root", &buf, &len, &e);
        CHECK_MSG(rc == 0 || rc == ERR_RANGE, "rc %d %s", rc, e.msg);
        if (rc == 0) {
            CHECK(len <= GRAMMAR_MAX_SRC_BYTES);
            grammar *g = NULL;
            int rc2 = grammar_from_gbnf(buf, len, &g, &e);
            CHECK_MSG(rc2 == 0 || rc2 == ERR_RANGE, "rc %d %s", rc2, e.msg);
            grammar_unref(g);
        }
        free(buf);
        json_decref(s);
    }
    /* a long property name, a long pattern, nested groups */
    {
        char *nm = xmalloc(5001);
        memset(nm, 'k', 5000);
        nm[5000] = 0;
        json_t *s = json_pack("{s:{s:{}}}", "properties", nm);
        char *buf = NULL;
        size_t len = 0;
        err_t e = {0};
        CHECK_EQ_INT(schema_to_gbnf(s, "root", &buf, &len, &e), ERR_RANGE);
        json_decref(s);
        memset(nm, '(', 5000);
        s = json_pack("{s:s,s:s}", "type", "string", "pattern", nm);
        CHECK_MSG(schema_to_gbnf(s, "root", &buf, &len, &e) < 0, "a pattern of 5000 '(' compiled");
        json_decref(s);
        for (int i = 0; i < 200; i++) nm[i] = '(';
        nm[200] = 'a';
        for (int i = 0; i < 200; i++) nm[201 + i] = ')';
        nm[401] = 0;
        s = json_pack("{s:s,s:s}", "type", "string", "pattern", nm);
        CHECK_EQ_INT(schema_to_gbnf(s, "root", &buf, &len, &e), ERR_RANGE);
        json_decref(s);
        free(nm);
        free(buf);
    }
    /* a $ref chain that doubles at each level stays linear (each definition is one rule) */
    {
        json_t *defs = json_object();
        char nm[16], ref[32];
        json_object_set_new(defs, "d0", json_pack("{s:s}", "type", "integer"));
        for (int i = 1; i < 25; i++) {
            snprintf(nm, sizeof nm, "d%d", i);
            snprintf(ref, sizeof ref, "#/$defs/d%d", i - 1);
            json_object_set_new(defs, nm,
                                json_pack("{s:s,s:[{s:s},{s:s}]}", "type", "array", "prefixItems", "$ref", ref, "$ref", ref));
        }
        json_t *s = json_pack("{s:o,s:s}", "$defs", defs, "$ref", "#/$defs/d24");
        char *buf = NULL;
        size_t len = 0;
        err_t e = {0};
        CHECK_EQ_INT(schema_to_gbnf(s, "root", &buf, &len, &e), 0);
        CHECK_MSG(len < 20000, "grammar of %zu bytes", len);
        grammar *g = compile_text_ok(buf, len);
        grammar_unref(g);
        free(buf);
        json_decref(s);
    }
}

/* Several schemas in one grammar under different names; the any-object grammar. */
static void check_append(void) {
    char *buf = NULL;
    size_t len = 0;
    err_t e = {0};
    json_t *a = json_pack("{s:s}", "type", "integer"), *b = json_pack("{s:s,s:i}", "type", "string", "maxLength", 2);
    CHECK_EQ_INT(schema_to_gbnf(a, "tool-a", &buf, &len, &e), 0);
    CHECK_EQ_INT(schema_to_gbnf(b, "tool-b", &buf, &len, &e), 0);
    CHECK_EQ_INT(schema_to_gbnf(a, "bad name", &buf, &len, &e), ERR_INVALID);
    CHECK(len == strlen(buf));
    char *full = xmalloc(len + 64);
    snprintf(full, len + 64, "root ::= tool-a | tool-b\n%s", buf);
    grammar *g = compile_text_ok(full, strlen(full));
    if (g) {
        CHECK_EQ_INT(run(g, "12"), 1);
        CHECK_EQ_INT(run(g, "\"ab\""), 1);
        CHECK_EQ_INT(run(g, "\"abc\""), -1);
        grammar_unref(g);
    }
    free(full);
    free(buf);
    json_decref(a);
    json_decref(b);
    buf = NULL;
    CHECK_EQ_INT(schema_any_object_gbnf("root", &buf, &len, &e), 0);
    g = buf ? compile_text_ok(buf, len) : NULL;
    if (g) {
        CHECK_EQ_INT(run(g, "{}"), 1);
        CHECK_EQ_INT(run(g, "{\"a\": [1, {\"b\": null}], \"c\": \"x\"}"), 1);
        CHECK_EQ_INT(run(g, "[]"), -1);
        CHECK_EQ_INT(run(g, "1"), -1);
        grammar_unref(g);
    }
    free(buf);
}

int main(void) {
    bytes_vocab = gvocab_new(256, byte_piece, NULL, NULL);
    check_append();
    check_rows();
    check_int_ranges();
    check_errors();
    check_hostile();
    gvocab_free(bytes_vocab);
    return test_summary("test_schema");
}
