/* test_jfield.c — server/jfield: each reader's types, range edges, absent
 * vs null vs a wrong type, the exact refusal text in each path style, and
 * the field a refusal reports. */
#include "server/jfield.h"
#include "test.h"

static const jf_style tagged = {.quote = JF_TAGGED, .params = true};
static const jf_style quoted = {.quote = JF_QUOTED};
static const jf_style anth = {.quote = JF_COLON, .dot_index = true, .missing = "Field required"};
static const jf_style resp = {.quote = JF_COLON, .params = true};
static const jf_style bare = {.quote = JF_BARE};

static json_t *body;
static oai_error err;

/* The refusal's message, status 400 and ERR_INVALID checked. */
static const char *msg(void) {
    CHECK_EQ_INT(err.status, 400);
    CHECK_EQ_INT(err.e.code, ERR_INVALID);
    return err.e.msg;
}

static void reset(void) { memset(&err, 0, sizeof err); }

int main(void) {
    body = json_loads("{\"s\":\"x\", \"e\":\"\", \"n\":null, \"t\":true, \"i\":3, \"r\":2.5, \"r16\":16.0, \"big\":1e300,"
                      " \"o\":{\"k\":1, \"type\":\"text\"}, \"a\":[1,2], \"ea\":[], \"neg\":-1}",
                      0, NULL);
    CHECK(body != NULL);
    jf b = jf_body(&quoted, &err);
    json_t *v;

    /* absent and null are both "not given"; a wrong type is refused */
    reset();
    CHECK_EQ_INT(jf_get(&b, body, "missing", JF_STRING, NULL, &v), 0);
    CHECK(v == NULL);
    CHECK_EQ_INT(jf_get(&b, body, "n", JF_STRING, NULL, &v), 0);
    CHECK(v == NULL);
    CHECK_EQ_INT(err.status, 0); /* nothing written when it passes */
    CHECK_EQ_INT(jf_get(&b, body, "s", JF_STRING, NULL, &v), 0);
    CHECK_STR(json_string_value(v), "x");
    CHECK_EQ_INT(jf_get(&b, body, "i", JF_STRING, NULL, &v), ERR_INVALID);
    CHECK(v == NULL);
    CHECK_STR(msg(), "'i' must be a string");
    CHECK(err.field == NULL); /* quoted: no params */

    /* each type's complaint */
    static const struct {
        const char *name;
        unsigned type;
        const char *want;
    } types[] = {
        {"s", JF_BOOL, "'s' must be a boolean"},
        {"s", JF_INT, "'s' must be an integer"},
        {"s", JF_NUMBER, "'s' must be a number"},
        {"s", JF_OBJECT, "'s' must be an object"},
        {"s", JF_ARRAY, "'s' must be an array"},
        {"e", JF_STRING | JF_NONEMPTY, "'e' must be a non-empty string"},
        {"ea", JF_ARRAY | JF_NONEMPTY, "'ea' must be a non-empty array"},
        {"i", JF_STRING | JF_OBJECT, "'i' must be a string or an object"},
        {"r", JF_INT, "'r' must be an integer"},
        {"t", JF_NUMBER, "'t' must be a number"},
    };
    for (size_t k = 0; k < ARRAY_LEN(types); k++) {
        reset();
        CHECK_EQ_INT(jf_get(&b, body, types[k].name, types[k].type, NULL, &v), ERR_INVALID);
        CHECK_STR(msg(), types[k].want);
    }
    /* and what each takes */
    CHECK_EQ_INT(jf_get(&b, body, "i", JF_NUMBER, NULL, &v), 0);
    CHECK(v && json_integer_value(v) == 3);
    CHECK_EQ_INT(jf_get(&b, body, "r", JF_NUMBER, NULL, &v), 0);
    CHECK_EQ_INT(jf_get(&b, body, "o", JF_OBJECT, NULL, &v), 0);
    CHECK(json_is_object(v));
    CHECK_EQ_INT(jf_get(&b, body, "a", JF_ARRAY | JF_NONEMPTY, NULL, &v), 0);
    CHECK_EQ_INT(jf_get(&b, body, "s", JF_STRING | JF_OBJECT, NULL, &v), 0);
    CHECK_EQ_INT(jf_get(&b, body, "i", 0, NULL, &v), 0); /* no type: any */
    CHECK(v != NULL);
    /* the caller's own words */
    reset();
    CHECK_EQ_INT(jf_get(&b, body, "s", JF_OBJECT, "a JSON Schema object", &v), ERR_INVALID);
    CHECK_STR(msg(), "'s' must be a JSON Schema object");

    /* required: absent or null refused with the type's complaint; needed:
     * with "is required" (or the style's word) */
    reset();
    CHECK_EQ_INT(jf_get(&b, body, "n", JF_STRING | JF_REQUIRED, NULL, &v), ERR_INVALID);
    CHECK_STR(msg(), "'n' must be a string");
    reset();
    CHECK_EQ_INT(jf_get(&b, body, "missing", JF_STRING | JF_NEEDED, NULL, &v), ERR_INVALID);
    CHECK_STR(msg(), "'missing' is required");
    reset();
    CHECK_EQ_INT(jf_get(&b, body, "i", JF_STRING | JF_NEEDED, NULL, &v), ERR_INVALID);
    CHECK_STR(msg(), "'i' must be a string");

    /* booleans keep the default when absent */
    bool flag = true;
    CHECK_EQ_INT(jf_bool(&b, body, "missing", &flag), 0);
    CHECK(flag);
    CHECK_EQ_INT(jf_bool(&b, body, "n", &flag), 0);
    CHECK(flag);
    CHECK_EQ_INT(jf_bool(&b, body, "t", &flag), 0);
    CHECK(flag);
    reset();
    CHECK_EQ_INT(jf_bool(&b, body, "i", &flag), ERR_INVALID);
    CHECK_STR(msg(), "'i' must be a boolean");

    /* OpenAI's integers: range edges, integral reals taken */
    long long x = -7;
    bool present = true;
    CHECK_EQ_INT(jf_int(&b, body, "missing", 0, 5, &x, &present), 0);
    CHECK(!present && x == -7);
    CHECK_EQ_INT(jf_int(&b, body, "i", 3, 3, &x, &present), 0);
    CHECK(present && x == 3);
    CHECK_EQ_INT(jf_int(&b, body, "r16", 0, 16, &x, NULL), 0);
    CHECK_EQ_INT(x, 16);
    reset();
    CHECK_EQ_INT(jf_int(&b, body, "i", 4, 10, &x, NULL), ERR_INVALID);
    CHECK_STR(msg(), "'i' must be an integer in [4, 10]; got 3");
    reset();
    CHECK_EQ_INT(jf_int(&b, body, "i", 0, 2, &x, NULL), ERR_INVALID);
    CHECK_STR(msg(), "'i' must be an integer in [0, 2]; got 3");
    reset();
    CHECK_EQ_INT(jf_int(&b, body, "r", 0, 10, &x, NULL), ERR_INVALID);
    CHECK_STR(msg(), "'r' must be an integer");
    reset();
    CHECK_EQ_INT(jf_int(&b, body, "big", 0, 10, &x, NULL), ERR_INVALID); /* integral, but no long long */
    CHECK_STR(msg(), "'big' must be an integer");
    reset();
    CHECK_EQ_INT(jf_int(&b, body, "s", 0, 10, &x, NULL), ERR_INVALID);
    CHECK_STR(msg(), "'s' must be an integer");

    /* OpenAI's numbers: closed and open ends */
    double d = -1;
    CHECK_EQ_INT(jf_num(&b, body, "missing", 0, false, 1, &d), 0);
    CHECK(d == -1);
    CHECK_EQ_INT(jf_num(&b, body, "r", 2.5, false, 2.5, &d), 0);
    CHECK(d == 2.5);
    reset();
    CHECK_EQ_INT(jf_num(&b, body, "r", 2.5, true, 3, &d), ERR_INVALID);
    CHECK_STR(msg(), "'r' must be in (2.5, 3]; got 2.5");
    reset();
    CHECK_EQ_INT(jf_num(&b, body, "r", 0, false, 2, &d), ERR_INVALID);
    CHECK_STR(msg(), "'r' must be in [0, 2]; got 2.5");
    reset();
    CHECK_EQ_INT(jf_num(&b, body, "t", 0, false, 2, &d), ERR_INVALID);
    CHECK_STR(msg(), "'t' must be a number");

    /* one complaint for a wrong type or range */
    CHECK_EQ_INT(jf_int_in(&b, body, "i", 3, 3, "an integer >= 3", &v), 0);
    CHECK(v && json_integer_value(v) == 3);
    CHECK_EQ_INT(jf_int_in(&b, body, "n", 3, 3, "x", &v), 0);
    CHECK(v == NULL);
    reset();
    CHECK_EQ_INT(jf_int_in(&b, body, "neg", 0, 10, "an integer >= 0", &v), ERR_INVALID);
    CHECK_STR(msg(), "'neg' must be an integer >= 0");
    reset();
    CHECK_EQ_INT(jf_int_in(&b, body, "r16", 0, 100, "an integer >= 0", &v), ERR_INVALID); /* 16.0: not a JSON integer */
    CHECK_STR(msg(), "'r16' must be an integer >= 0");
    CHECK_EQ_INT(jf_num_in(&b, body, "r", 0, 2.5, "a number in [0, 2.5]", &v), 0);
    CHECK(v != NULL);
    CHECK_EQ_INT(jf_num_in(&b, body, "i", 3, 3, "three", &v), 0);
    reset();
    CHECK_EQ_INT(jf_num_in(&b, body, "r", 0, 2.4, "a number in [0, 2.4]", &v), ERR_INVALID);
    CHECK_STR(msg(), "'r' must be a number in [0, 2.4]");
    reset();
    CHECK_EQ_INT(jf_num_in(&b, body, "s", 0, 1, "a number in [0, 1]", &v), ERR_INVALID);
    CHECK_STR(msg(), "'s' must be a number in [0, 1]");

    /* enums */
    static const char *const one[] = {"x"}, *const two[] = {"a", "x"}, *const three[] = {"a", "b", "c"};
    int idx = -1;
    CHECK_EQ_INT(jf_enum(&b, body, "missing", three, 3, &idx), 0);
    CHECK_EQ_INT(idx, -1);
    CHECK_EQ_INT(jf_enum(&b, body, "s", two, 2, &idx), 0);
    CHECK_EQ_INT(idx, 1);
    reset();
    CHECK_EQ_INT(jf_enum(&b, body, "s", three, 3, &idx), ERR_INVALID);
    CHECK_STR(msg(), "'s' must be \"a\", \"b\" or \"c\"");
    reset();
    CHECK_EQ_INT(jf_enum(&b, body, "i", two, 2, &idx), ERR_INVALID);
    CHECK_STR(msg(), "'i' must be \"a\" or \"x\"");
    reset();
    CHECK_EQ_INT(jf_enum(&b, body, "e", one, 1, &idx), ERR_INVALID);
    CHECK_STR(msg(), "'e' must be \"x\"");

    /* paths: members and elements in each style; the param is the
     * top-level field (with params), kept below it, and may be set */
    jf t = jf_body(&tagged, &err);
    jf m = jf_key(&t, "messages"), m2 = jf_index(&m, 2), calls = jf_key(&m2, "tool_calls"), c0 = jf_index(&calls, 0);
    CHECK_STR(c0.path, "messages[2].tool_calls[0]");
    reset();
    CHECK_EQ_INT(jf_fail(&c0, "function.name", "must be a string"), ERR_INVALID);
    CHECK_STR(msg(), "'" ERR_F("messages[2].tool_calls[0].function.name") "' must be a string");
    CHECK_STR(err.field, "messages");
    reset();
    jf_fail(&t, "model", "must be a string");
    CHECK_STR(msg(), "'" ERR_F("model") "' must be a string");
    CHECK_STR(err.field, "model");
    reset();
    m.param = "other";
    jf_fail(&m, NULL, "is %d", 5);
    CHECK_STR(msg(), "'" ERR_F("messages") "' is 5");
    CHECK_STR(err.field, "other");

    jf a = jf_body(&anth, &err);
    jf ams = jf_key(&a, "messages"), am = jf_index(&ams, 1), acs = jf_key(&am, "content"), ac = jf_index(&acs, 0);
    reset();
    CHECK_EQ_INT(jf_get(&ac, body, "missing", JF_STRING | JF_NEEDED, NULL, &v), ERR_INVALID);
    CHECK_STR(msg(), "messages.1.content.0.missing: Field required");
    CHECK(err.field == NULL);
    reset();
    jf_fail(&a, "max_tokens", "must be an integer >= 1");
    CHECK_STR(msg(), "max_tokens: must be an integer >= 1");
    CHECK(err.field == NULL);

    jf r = jf_body(&resp, &err);
    jf in = jf_key(&r, "input"), in3 = jf_index(&in, 3);
    reset();
    CHECK_EQ_INT(jf_get(&in3, body, "missing", JF_NEEDED, NULL, &v), ERR_INVALID);
    CHECK_STR(msg(), "input[3].missing: is required");
    CHECK_STR(err.field, "input");

    jf bb = jf_body(&bare, &err), br = jf_key(&bb, "input");
    reset();
    jf_fail(&br, NULL, "is empty");
    CHECK_STR(msg(), "input is empty");

    /* an object with a string type */
    const char *type = NULL;
    CHECK_EQ_INT(jf_typed(&in3, json_object_get(body, "o"), &type), 0);
    CHECK_STR(type, "text");
    reset();
    CHECK_EQ_INT(jf_typed(&in3, json_object_get(body, "a"), &type), ERR_INVALID);
    CHECK_STR(msg(), "input[3]: must be an object with a string 'type'");
    reset();
    CHECK_EQ_INT(jf_typed(&ac, json_object_get(body, "s"), &type), ERR_INVALID);
    CHECK_STR(msg(), "messages.1.content.0: must be an object with a string 'type'");

    /* token ids: [0, n_vocab), element named */
    json_t *ids = json_loads("[0, 9, 10]", 0, NULL);
    int32_t out[3] = {-1, -1, -1};
    jf tk = jf_key(&b, "tokens");
    reset();
    CHECK_EQ_INT(jf_token_ids(&tk, ids, 10, out), ERR_INVALID);
    CHECK_STR(msg(), "'tokens[2]' must be a token id in [0, 10)");
    CHECK(out[0] == 0 && out[1] == 9);
    CHECK_EQ_INT(jf_token_ids(&tk, ids, 11, out), 0);
    CHECK(out[2] == 10);
    json_decref(ids);
    ids = json_loads("[1, \"2\"]", 0, NULL);
    reset();
    CHECK_EQ_INT(jf_token_ids(&ac, ids, 10, out), ERR_INVALID);
    CHECK_STR(msg(), "messages.1.content.0.1: must be a token id in [0, 10)");
    json_decref(ids);

    /* a path longer than the reader holds is cut, never overrun */
    jf deep = b;
    for (int k = 0; k < 100; k++) deep = jf_key(&deep, "abcdefgh");
    CHECK(strlen(deep.path) < sizeof deep.path);
    reset();
    jf_fail(&deep, "x", "must be a string");
    CHECK(strlen(msg()) < sizeof err.e.msg);

    json_decref(body);
    return test_summary("jfield");
}
