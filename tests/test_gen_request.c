/*
 * test_gen_request.c — gen_request (server/generate.h): a request body, as
 * parsed by each API's reader, becomes the engine request the server would
 * submit, without an engine. The same path fuzz/fuzz_request.c fuzzes; here
 * its results are checked field by field with stories260K's real tokenizer
 * and the ChatML fallback template (the model has none):
 *   sampling, limits, logprobs and KV lifetime fields reach the req; the
 *   prompt is the rendered conversation; response_format gives a grammar from
 *   the first token, tools on auto a lazy one with a trigger; a prompt of
 *   n_ctx tokens or more is refused as context_length_exceeded; a grammar
 *   with an empty character class builds (fuzz finding, issue 14); the
 *   Anthropic prefill and the Responses previous_response_id go through
 *   api_anthropic_params / api_responses_params.
 */
#include <jansson.h>

#include "chat/chat.h"
#include "model/gguf.h"
#include "sched/req.h"
#include "server/api.h"
#include "server/apis.h"
#include "server/constrain.h"
#include "server/generate.h"
#include "server/oai.h"
#include "tok/tok.h"
#include "test.h"

static routes_ctx rc;

static json_t *body(const char *s) {
    json_error_t je;
    json_t *o = json_loads(s, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(o != NULL, "%s: %s", s, je.text);
    return o;
}

/* The chat request of a body, built with n_ctx; NULL (f filled) when refused. */
static req *chat_req(const char *s, int n_ctx, oai_error *f) {
    json_t *b = body(s);
    oai_params p;
    oai_error e;
    int r = oai_parse(b, OAI_CHAT, tok_n_vocab(rc.tok), &p, &e);
    json_decref(b);
    CHECK_MSG(r == 0, "%s: %s", s, e.e.msg);
    if (r != 0) return NULL;
    bool think_open;
    req *q = gen_request(&rc, &p, n_ctx, &think_open, NULL, f);
    oai_params_free(&p);
    return q;
}

/* The prompt's text (skipping special tokens), malloc'd. */
static char *prompt_text(const req *q) {
    int n = tok_decode(rc.tok, q->prompt, q->n_prompt, true, NULL, 0);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    tok_decode(rc.tok, q->prompt, q->n_prompt, true, s, n + 1);
    return s;
}

static void test_fields(void) {
    oai_error f;
    req *q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"temperature\": 0.5,"
                      " \"top_k\": 7, \"top_p\": 0.9, \"seed\": 9, \"max_tokens\": 12, \"logprobs\": true,"
                      " \"top_logprobs\": 3, \"ignore_eos\": true, \"kv_ttl\": 30, \"kv_hint\": {\"next_use_s\": 5},"
                      " \"stop\": [\"x\"], \"jump_forward\": false}",
                      512, &f);
    CHECK_MSG(q != NULL, "%s", f.e.msg);
    if (!q) return;
    CHECK_NEAR(q->sp.temperature, 0.5, 1e-6);
    CHECK_EQ_INT(q->sp.top_k, 7);
    CHECK_NEAR(q->sp.top_p, 0.9, 1e-6);
    CHECK_EQ_INT(q->sp.seed, 9);
    CHECK_EQ_INT(q->max_tokens, 12);
    CHECK_EQ_INT(q->n_logprobs, 3);
    CHECK(q->ignore_eos);
    CHECK(q->no_jump_forward);
    CHECK_NEAR(q->kv_ttl_s, 30, 1e-9);
    CHECK_NEAR(q->kv_next_use_s, 5, 1e-9);
    CHECK(!q->kv_done);
    CHECK(q->grammar == NULL && q->grammar_trigger == NULL);
    char *text = prompt_text(q);
    /* the ChatML fallback: the user turn, then the assistant's header */
    CHECK_MSG(strstr(text, "user\nOnce upon a time") != NULL, "%s", text);
    CHECK_MSG(strstr(text, "assistant\n") != NULL, "%s", text);
    free(text);
    req_unref(q);

    q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"kv_hint\": \"done\"}", 512, &f);
    CHECK(q && q->kv_done && q->max_tokens == INT32_MAX && q->n_logprobs == -1);
    req_unref(q);
}

/* reasoning_effort becomes the template variable of that name (mapped to
 * low/medium/high), unless chat_template_kwargs sets it; bad values are 400s
 * naming the field; the body's own kwargs object is not changed. */
static void test_reasoning_effort(void) {
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"high\"}", "high"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"minimal\"}", "low"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"xhigh\", \"chat_template_kwargs\": {\"x\": 1}}", "high"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"low\", \"chat_template_kwargs\": {\"reasoning_effort\": \"medium\"}}",
         "medium"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        json_t *b = body(cases[i].body);
        oai_params p;
        oai_error e;
        const int r = oai_parse(b, OAI_CHAT, tok_n_vocab(rc.tok), &p, &e);
        CHECK_MSG(r == 0, "%s: %s", cases[i].body, e.e.msg);
        const char *got = json_string_value(json_object_get(p.template_kwargs, "reasoning_effort"));
        CHECK_MSG(cases[i].want ? got && strcmp(got, cases[i].want) == 0 : got == NULL, "%s: %s", cases[i].body,
                  got ? got : "(none)");
        json_t *own = json_object_get(b, "chat_template_kwargs");
        if (own && i == 2) CHECK(json_object_get(own, "reasoning_effort") == NULL);
        oai_params_free(&p);
        json_decref(b);
    }
    json_t *b = body("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"max\"}");
    oai_params p;
    oai_error e;
    CHECK_EQ_INT(oai_parse(b, OAI_CHAT, tok_n_vocab(rc.tok), &p, &e), ERR_INVALID);
    CHECK(e.status == 400 && e.field && strcmp(e.field, "reasoning_effort") == 0 && strstr(e.e.msg, "reasoning_effort"));
    json_decref(b);
}

static void test_constraints(void) {
    oai_error f;
    req *q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"json\"}],"
                      " \"response_format\": {\"type\": \"json_object\"}}",
                      512, &f);
    CHECK_MSG(q && q->grammar && !q->grammar_trigger, "%s", q ? "" : f.e.msg);
    req_unref(q);
    q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}], \"tools\": [{\"type\": \"function\","
                 " \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\":"
                 " {\"city\": {\"type\": \"string\"}}}}}]}",
                 4096, &f);
    CHECK_MSG(q && q->grammar && q->grammar_trigger, "%s", q ? "" : f.e.msg);
    req_unref(q);
    /* harmony: the trigger is the call header's, and message bodies (the
     * analysis) do not count as calls */
    const tc_format was = rc.tool_format;
    rc.tool_format = TC_HARMONY;
    q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}], \"tools\": [{\"type\": \"function\","
                 " \"function\": {\"name\": \"get_weather\"}}]}",
                 4096, &f);
    CHECK_MSG(q && q->grammar && q->grammar_trigger && !strcmp(q->grammar_trigger, "to=functions.") &&
                  q->trigger_skip_open && !strcmp(q->trigger_skip_open, "<|message|>") &&
                  !strcmp(q->trigger_skip_close, "<|end|>") && !q->trigger_skip_now,
              "%s", q ? "" : f.e.msg);
    req_unref(q);
    rc.tool_format = was;
    /* an empty character class first: compiles (it matches nothing) */
    q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"g\"}], \"grammar\": \"root ::= [] | \\\"a\\\"\"}",
                 512, &f);
    CHECK_MSG(q && q->grammar, "%s", q ? "" : f.e.msg);
    req_unref(q);
    q = chat_req("{\"messages\": [{\"role\": \"user\", \"content\": \"g\"}], \"grammar\": \"root ::= nowhere\"}", 512, &f);
    CHECK(q == NULL && f.status == 400 && f.field && !strcmp(f.field, "grammar") && strstr(f.e.msg, "nowhere"));
    req_unref(q);
}

static void test_context(void) {
    oai_error f;
    const char *s = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time there was a cat\"}]}";
    req *q = chat_req(s, 512, &f);
    CHECK(q != NULL);
    int n = q ? q->n_prompt : 0;
    req_unref(q);
    q = chat_req(s, n, &f); /* the prompt must be shorter than the context */
    CHECK(q == NULL);
    CHECK_EQ_INT(f.status, 400);
    CHECK_STR(f.code, "context_length_exceeded");
    CHECK_MSG(strstr(f.e.msg, "tokens") != NULL, "%s", f.e.msg);
    req_unref(q);
    q = chat_req(s, n + 1, &f);
    CHECK(q && q->n_prompt == n);
    req_unref(q);
}

static void test_other_apis(void) {
    /* Anthropic: a final assistant message is a prefill the answer continues */
    json_t *b = body("{\"model\": \"m\", \"max_tokens\": 5, \"system\": \"Be brief.\", \"messages\": [{\"role\": \"user\","
                     " \"content\": \"Say hi\"}, {\"role\": \"assistant\", \"content\": \"Hi, I am\"}]}");
    oai_params p;
    oai_error e;
    int r = api_anthropic_params(&rc, b, false, &p, &e);
    CHECK_MSG(r == 0, "%s", e.e.msg);
    if (r == 0) {
        CHECK(p.continue_final);
        CHECK_EQ_INT(p.max_tokens, 5);
        oai_error f;
        bool think_open;
        req *q = gen_request(&rc, &p, 512, &think_open, NULL, &f);
        CHECK(q != NULL);
        if (q) {
            char *text = prompt_text(q);
            size_t n = strlen(text);
            CHECK_MSG(n >= 8 && !strcmp(text + n - 8, "Hi, I am"), "%s", text);
            CHECK_MSG(strstr(text, "Be brief.") != NULL, "%s", text);
            free(text);
        }
        req_unref(q);
        oai_params_free(&p);
    }
    /* max_tokens is required, except for count_tokens */
    json_object_del(b, "max_tokens");
    CHECK(api_anthropic_params(&rc, b, false, &p, &e) < 0 && e.status == 400 && strstr(e.e.msg, "max_tokens"));
    r = api_anthropic_params(&rc, b, true, &p, &e);
    CHECK_MSG(r == 0, "%s", e.e.msg);
    if (r == 0) oai_params_free(&p);
    json_decref(b);

    /* Responses: input and instructions; an unknown previous response */
    b = body("{\"input\": \"Once upon a time\", \"instructions\": \"Tell stories.\", \"max_output_tokens\": 7}");
    r = api_responses_params(&rc, b, &p, &e);
    CHECK_MSG(r == 0, "%s", e.e.msg);
    if (r == 0) {
        CHECK_EQ_INT(p.max_tokens, 7);
        oai_error f;
        bool think_open;
        req *q = gen_request(&rc, &p, 512, &think_open, NULL, &f);
        char *text = q ? prompt_text(q) : NULL;
        CHECK_MSG(text && strstr(text, "system\nTell stories.") && strstr(text, "user\nOnce upon a time"), "%s",
                  text ? text : f.e.msg);
        free(text);
        req_unref(q);
        oai_params_free(&p);
    }
    json_object_set_new(b, "previous_response_id", json_string("resp_nope"));
    CHECK(api_responses_params(&rc, b, &p, &e) < 0);
    CHECK_EQ_INT(e.status, 404);
    CHECK_STR(api_error_param(&api_responses, &e), "previous_response_id");
    json_decref(b);
}

/* Completions' echo / suffix / best_of and guided_regex: parsed and built
 * (a grammar from the regex), or refused naming the field; stories260K has
 * no fill-in-the-middle tokens, so suffix is the builder's 400. */
/* oai_parse of a /v1/completions body given as text. */
static int parse_completion(const char *text, oai_params *p, oai_error *e) {
    json_t *b = body(text);
    int r = oai_parse(b, OAI_COMPLETION, tok_n_vocab(rc.tok), p, e);
    json_decref(b);
    return r;
}

static void test_completion_extras(void) {
    static const struct {
        const char *body, *param; /* param NULL: accepted and built */
    } cases[] = {
        {"{\"prompt\":\"Hi\",\"guided_regex\":\"[0-9]{2}\\\"x|(ab)+\"}", NULL},
        {"{\"prompt\":\"Hi\",\"guided_regex\":\"(\"}", "guided_regex"},
        {"{\"prompt\":\"Hi\",\"guided_regex\":\"a\\\\1\"}", "guided_regex"},
        {"{\"prompt\":\"Hi\",\"guided_regex\":\"\"}", "guided_regex"},
        {"{\"prompt\":\"Hi\",\"echo\":true,\"best_of\":3,\"n\":2}", NULL},
        {"{\"prompt\":\"Hi\",\"echo\":true,\"logprobs\":1}", "echo"},
        {"{\"prompt\":\"Hi\",\"echo\":1}", "echo"},
        {"{\"prompt\":\"Hi\",\"n\":3,\"best_of\":2}", "best_of"},
        {"{\"prompt\":\"Hi\",\"best_of\":2,\"stream\":true}", "best_of"},
        {"{\"prompt\":\"Hi\",\"best_of\":17}", "best_of"},
        {"{\"prompt\":\"Hi\",\"suffix\":5}", "suffix"},
        {"{\"prompt\":[1,2],\"suffix\":\"x\"}", "suffix"},
        {"{\"prompt\":\"Hi\",\"suffix\":\"the end\"}", "suffix"}, /* no FIM tokens */
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        oai_params p;
        oai_error e;
        int r = parse_completion(cases[i].body, &p, &e);
        const char *param = r < 0 ? e.field : NULL;
        oai_error f = {0};
        req *q = NULL;
        if (r == 0) {
            bool think_open;
            q = gen_request(&rc, &p, 512, &think_open, NULL, &f);
            if (!q) param = f.field;
            if (q && strstr(cases[i].body, "guided_regex")) CHECK_MSG(q->grammar != NULL, "%s: no grammar", cases[i].body);
            oai_params_free(&p);
        }
        if (cases[i].param)
            CHECK_MSG(!q && param && !strcmp(param, cases[i].param), "%s: want a refusal naming %s, got %s (%s %s)",
                      cases[i].body, cases[i].param, param ? param : "none", e.e.msg, f.e.msg);
        else
            CHECK_MSG(q != NULL, "%s: refused: %s %s", cases[i].body, e.e.msg, f.e.msg);
        if (q) req_unref(q);
    }
}

/* The logprob budget of a non-streamed answer (oai.c logprob_budget):
 * 262,144 entries (chosen + alternatives) over every choice. */
static void test_logprob_budget(void) {
    static const struct {
        const char *body;
        int max_tokens; /* after parsing; 0: refused naming max_tokens */
    } cases[] = {
        {"{\"prompt\":[\"a\",\"b\",\"c\",\"d\"],\"n\":16,\"logprobs\":20}", 195}, /* 262144 / (21 x 64) */
        {"{\"prompt\":\"a\",\"logprobs\":0}", 262144},
        {"{\"prompt\":\"a\",\"logprobs\":20,\"max_tokens\":12483}", 12483},
        {"{\"prompt\":\"a\",\"logprobs\":20,\"max_tokens\":12484}", 0},
        {"{\"prompt\":\"a\",\"logprobs\":20,\"max_tokens\":20000,\"stream\":true}", 20000}, /* streamed: no bound */
        {"{\"prompt\":\"a\",\"max_tokens\":100000}", 100000},                               /* no logprobs */
        {"{\"prompt\":\"a\"}", -1},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        oai_params p;
        oai_error e = {0};
        int r = parse_completion(cases[i].body, &p, &e);
        if (cases[i].max_tokens == 0) {
            CHECK_MSG(r < 0 && e.field && !strcmp(e.field, "max_tokens") && strstr(e.e.msg, "at most 262144"),
                      "%s: %d %s", cases[i].body, r, e.e.msg);
        } else {
            CHECK_MSG(r == 0 && p.max_tokens == cases[i].max_tokens, "%s: %d, max_tokens %d (want %d) %s", cases[i].body,
                      r, r == 0 ? p.max_tokens : 0, cases[i].max_tokens, e.e.msg);
        }
        if (r == 0) oai_params_free(&p);
    }
}

/* A refusal of the core names its fields in each API's terms (api.h): the
 * field paths of the message and the reported param, written out here as
 * each API's documentation names them. */
static void test_error_names(void) {
    static const struct {
        const char *body;
        const api_ops *api;
        const char *msg, *param;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", &api_openai,
         "'max_tokens' must be an integer in [1, 2147483647]; got 0", "max_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", &api_responses,
         "'max_output_tokens' must be an integer in [1, 2147483647]; got 0", "max_output_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", &api_ollama_api,
         "'max_tokens' must be an integer in [1, 2147483647]; got 0", "options.num_predict"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\",\"parameters\":5}}]}", &api_openai,
         "tools[0].function.parameters must be a JSON Schema object", "tools"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\",\"parameters\":5}}]}", &api_anthropic, "tools.0.input_schema must be a JSON Schema object",
         "tools"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\",\"parameters\":5}}]}", &api_responses, "tools[0].parameters must be a JSON Schema object",
         "tools"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",3]}", &api_anthropic,
         "'stop_sequences.1' must be a string", "stop"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":5}}}", &api_responses, "'text.format.name' must be a string", "text.format"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        json_t *b = body(cases[i].body);
        oai_params p;
        oai_error e;
        int r = oai_parse(b, OAI_CHAT, tok_n_vocab(rc.tok), &p, &e);
        json_decref(b);
        CHECK_MSG(r < 0 && e.status == 400, "%s: not refused", cases[i].body);
        if (r == 0) {
            oai_params_free(&p);
            continue;
        }
        char msg[512];
        api_error_text(cases[i].api, e.e.msg, msg, sizeof msg);
        CHECK_MSG(!strcmp(msg, cases[i].msg), "%s: %s says \"%s\", want \"%s\"", cases[i].body, cases[i].api->name, msg,
                  cases[i].msg);
        const char *param = api_error_param(cases[i].api, &e);
        CHECK_MSG(param && !strcmp(param, cases[i].param), "%s: %s param %s, want %s", cases[i].body,
                  cases[i].api->name, param ? param : "none", cases[i].param);
    }
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    gguf_ctx *g = NULL;
    tokenizer *tk = NULL;
    chat_tmpl *chat = NULL;
    err_t e = {0};
    CHECK_MSG(gguf_open(path, &g, &e) == 0 && tok_load(g, &tk, &e) == 0, "%s: %s", path, e.msg);
    CHECK(chat_tmpl_new(tok_chat_template(tk), &chat, &e) == 0);
    if (!tk || !chat) return test_summary("test_gen_request");
    rc.tok = tk;
    rc.chat = chat;
    rc.tool_format = TC_GENERIC;
    rc.cons = constrainer_new(8, 0);
    rc.responses = resp_store_new(0);
    atomic_init(&rc.next_id, 1);
    test_fields();
    test_reasoning_effort();
    test_constraints();
    test_context();
    test_other_apis();
    test_error_names();
    test_completion_extras();
    test_logprob_budget();
    constrainer_free(rc.cons);
    resp_store_free(rc.responses);
    chat_tmpl_free(chat);
    tok_free(tk);
    gguf_free(g);
    return test_summary("test_gen_request");
}
