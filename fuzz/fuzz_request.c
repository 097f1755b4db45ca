/*
 * fuzz_request.c — libFuzzer target for the HTTP-facing request path as a
 * whole: the input is a request body, and it goes through the functions the
 * server runs for it, up to the engine request, on every generation route:
 *
 *   POST /v1/chat/completions  oai_parse (chat)        ┐
 *   POST /v1/completions       oai_parse (completions) │  gen_request:
 *   POST /v1/messages          api_anthropic_params    │  constraint (tools, tool_choice,
 *   .../count_tokens           (count_only)            ├─ response_format / json_schema /
 *   POST /v1/responses         api_responses_params    │  grammar compiled), chat template
 *   POST /api/chat             api_ollama_params       │  render, tokenization, context
 *   POST /api/generate         (chat false)            ┘  check, sampling / stop / logprobs /
 *                                                         kv_ttl / kv_hint fields → req
 *
 * then frees the req (nothing is submitted: no engine, no sockets) and, for
 * a refusal, builds the OpenAI error body from the message. The body is read
 * as the server reads it (oai_load_body's limits: duplicate keys refused,
 * at most OAI_MAX_JSON_VALUES values); larger inputs are skipped.
 *
 * Setup (once per process): the real stories260K tokenizer
 * ($KVLOOM_SHARED/models/stories260K.gguf, default ../shared, or
 * models/stories260K.gguf) and chat templates. The body's "model" field picks
 * the template as a server serving that model would have it: a name of
 * tests/fixtures/templates/NAME.jinja ("qwen3", "llama31", "mistral-v03",
 * ...) renders with that template and its tool-call format and reasoning
 * (as server.c derives them); any other model uses stories260K's own (the
 * ChatML fallback, generic tool format). Run from the repository root (make
 * test and tools/fuzz.sh do); a missing file aborts with its path.
 *
 * Any outcome but a crash, a leak, UB or an assert is fine: every body is a
 * request or a refusal with a message. A refusal must carry a message and a
 * 4xx status; an accepted request has 1..n_ctx-1 prompt tokens.
 * Corpus: fuzz/corpus/fuzz_request/ (request bodies of each API).
 * FUZZ_VERBOSE=1 prints each route's outcome (to check what new seeds reach).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/toolcall.h"
#include "model/gguf.h"
#include "sched/req.h"
#include "server/api.h"
#include "server/apis.h"
#include "server/constrain.h"
#include "server/generate.h"
#include "server/oai.h"
#include "tok/tok.h"

/* The context the prompt must fit: a larger model's, not stories260K's 512
 * (its small vocabulary makes most tool prompts longer than that, and the
 * request would stop at the context check before req_new). */
#define N_CTX 32768

static const char *const TEMPLATES[] = {"gemma2", "gemma3", "llama2",  "llama3", "llama31",  "llama32",
                                        "mistral-v03", "phi3", "qwen25", "qwen3", "smollm2", "unsupported"};
#define N_SETUPS (1 + (int)(sizeof TEMPLATES / sizeof *TEMPLATES))

typedef struct setup {
    const char *name;
    chat_tmpl *chat;
    tc_format tool_format;
    bool reasoning, template_calls;
} setup;

static gguf_ctx *g_gguf;
static tokenizer *g_tok;
static resp_store *g_store;
static setup g_setups[N_SETUPS]; /* [0]: the model's own template */
static bool g_verbose;
static const char *g_route;

static char *read_file(const char *path) {
    char *s = NULL;
    size_t n;
    err_t e = {0};
    if (file_read_all(path, &s, &n, &e) < 0) {
        fprintf(stderr, "fuzz_request: %s: %s (run from the repository root)\n", path, e.msg);
        abort();
    }
    return s;
}

/* As server.c: the format and flags follow from the template's text. */
static void setup_init(setup *s, const char *name, const char *src) {
    err_t e = {0};
    s->name = name;
    if (chat_tmpl_new(src, &s->chat, &e) < 0) {
        fprintf(stderr, "fuzz_request: template %s: %s\n", name, e.msg);
        abort();
    }
    bool fallback = chat_tmpl_fallback_reason(s->chat) != NULL;
    s->tool_format = fallback ? TC_GENERIC : tc_detect(src);
    s->reasoning = !fallback && src && strstr(src, "<think>");
    s->template_calls = !fallback && src && strstr(src, "tool_calls");
}

static void init(void) {
    char path[1024];
    const char *shared = getenv("KVLOOM_SHARED");
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared && *shared ? shared : "../shared");
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    else snprintf(path, sizeof path, "models/stories260K.gguf");
    err_t e = {0};
    if (gguf_open(path, &g_gguf, &e) < 0 || tok_load(g_gguf, &g_tok, &e) < 0) {
        fprintf(stderr, "fuzz_request: %s: %s\n", path, e.msg);
        abort();
    }
    setup_init(&g_setups[0], "stories260K", tok_chat_template(g_tok));
    for (int i = 1; i < N_SETUPS; i++) {
        char tp[256];
        snprintf(tp, sizeof tp, "tests/fixtures/templates/%s.jinja", TEMPLATES[i - 1]);
        char *src = read_file(tp);
        setup_init(&g_setups[i], TEMPLATES[i - 1], src);
        free(src);
    }
    g_store = resp_store_new(0);
    g_verbose = getenv("FUZZ_VERBOSE") && atoi(getenv("FUZZ_VERBOSE"));
}

static void refused(const api_ops *api, const oai_error *e);

/* The request as the server would build it, then freed. */
static void run_request(routes_ctx *rc, oai_params *p) {
    oai_error err;
    bool think_open;
    req *r = gen_request(rc, p, N_CTX, &think_open, NULL, &err);
    if (r) {
        if (r->n_prompt < 1 || r->n_prompt >= N_CTX) {
            fprintf(stderr, "fuzz_request: a request of %d prompt tokens was built\n", r->n_prompt);
            abort();
        }
        if (g_verbose) fprintf(stderr, "  %s: a request of %d tokens%s%s\n", g_route, r->n_prompt,
                               r->grammar ? ", grammar" : "", r->grammar_trigger ? " (lazy)" : "");
        req_unref(r);
    } else {
        refused(&api_openai, &err);
    }
    oai_params_free(p);
}

/* A refusal: a 4xx with a message, rendered in the API's terms and shape. */
static void refused(const api_ops *api, const oai_error *e) {
    char msg[1024];
    api_error_text(api, e->e.msg, msg, sizeof msg);
    const char *param = api_error_param(api, e);
    if (g_verbose)
        fprintf(stderr, "  %s: %d %s (param %s, code %s)\n", g_route, e->status, msg, param ? param : "-",
                e->code ? e->code : "-");
    if (e->status < 400 || e->status > 499 || !msg[0]) {
        fprintf(stderr, "fuzz_request: a refusal without a 4xx status and message (%d '%s')\n", e->status, msg);
        abort();
    }
    free(api->error_json(e->status, msg, param, e->code));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    if (!g_tok) init();
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    const setup *s = &g_setups[0];
    json_t *model = json_object_get(body, "model");
    for (int i = 1; i < N_SETUPS && json_is_string(model); i++)
        if (!strcmp(json_string_value(model), g_setups[i].name)) s = &g_setups[i];
    routes_ctx rc;
    memset(&rc, 0, sizeof rc);
    rc.tok = g_tok;
    rc.chat = s->chat;
    rc.tool_format = s->tool_format;
    rc.reasoning = s->reasoning;
    rc.template_calls = s->template_calls;
    rc.cons = constrainer_new(4, 0); /* fresh per input: no cache state between inputs */
    rc.responses = g_store;
    snprintf(rc.model_id, sizeof rc.model_id, "stories260K");
    atomic_init(&rc.next_id, 1);

    int n_vocab = tok_n_vocab(g_tok);
    for (int kind = 0; kind < 2; kind++) {
        oai_params p;
        oai_error e;
        g_route = kind ? "chat" : "completions";
        if (oai_parse(body, (oai_kind)kind, n_vocab, &p, &e) == 0) run_request(&rc, &p);
        else refused(&api_openai, &e);
    }
    for (int count_only = 0; count_only < 2; count_only++) {
        oai_params p;
        oai_error e;
        g_route = count_only ? "messages/count_tokens" : "messages";
        if (api_anthropic_params(&rc, body, count_only, &p, &e) == 0) run_request(&rc, &p);
        else refused(&api_anthropic, &e);
    }
    {
        oai_params p;
        oai_error e;
        g_route = "responses";
        if (api_responses_params(&rc, body, &p, &e) == 0) run_request(&rc, &p);
        else refused(&api_responses, &e);
    }
    for (int chat = 0; chat < 2; chat++) {
        oai_params p;
        oai_kind kind;
        bool stream;
        oai_error e;
        g_route = chat ? "api/chat" : "api/generate";
        int t = api_ollama_params(&rc, body, chat, &p, &kind, &stream, &e);
        if (t > 0) run_request(&rc, &p);
        else if (t < 0) refused(&api_ollama_api, &e);
    }
    constrainer_free(rc.cons);
    json_decref(body);
    return 0;
}
