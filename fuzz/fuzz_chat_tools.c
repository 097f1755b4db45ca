/*
 * fuzz_chat_tools.c — libFuzzer target for the chat-message renderer with
 * tools and the tool-call parsers that read what such prompts make a model
 * write.
 *
 * Input: a JSON object shaped like a chat request body — "messages" (any
 * value: chat_render validates it), "tools" (any value; passed to the
 * template when it is an array), "chat_template_kwargs" (extra template
 * variables when an object) and "add_generation_prompt" (default true).
 * Inputs that are not a JSON object only go through the parsers (below).
 *
 * For each template of tests/fixtures/templates/ (the real templates the
 * tests check: Llama 2/3/3.1/3.2, Qwen 2.5/3, Mistral v0.3, Gemma 2/3,
 * Phi-3, SmolLM2, and one that falls back to ChatML) plus the built-in
 * ChatML fallback, the messages are rendered with the tools (chat_render,
 * src/chat/chat.c); then the template's tool-call parser (tc_detect's format,
 * tools on, <think> reasoning when the template writes it) reads the
 * rendered prompt and each assistant message's content as if the model had
 * generated them — fed whole and in pieces of 1..16 bytes; both must give the
 * same content, reasoning and calls. Non-JSON input is the generated text,
 * parsed in every format.
 *
 * Checked: no crash, leak, UB or assert; chat_render returns text or an
 * error with a message, never both; the parsers do not depend on how the
 * text is split. Run from the repository root (make test and tools/fuzz.sh
 * do): a missing template file aborts with its path.
 * Corpus: fuzz/corpus/fuzz_chat_tools/ (conversations with tools and calls).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/toolcall.h"

static const char *const TEMPLATES[] = {"gemma2", "gemma3", "llama2",  "llama3", "llama31",  "llama32",
                                        "mistral-v03", "phi3", "qwen25", "qwen3", "smollm2", "unsupported"};
#define N_TMPL (1 + (int)(sizeof TEMPLATES / sizeof *TEMPLATES))

typedef struct tmpl {
    chat_tmpl *chat;
    tc_format format;
    bool reasoning;
} tmpl;

static tmpl g_tmpl[N_TMPL]; /* [N_TMPL - 1]: the ChatML fallback */
static bool g_ready;

static void init(void) {
    for (int i = 0; i < N_TMPL; i++) {
        char *src = NULL;
        if (i < N_TMPL - 1) {
            char path[256];
            size_t n;
            err_t e = {0};
            snprintf(path, sizeof path, "tests/fixtures/templates/%s.jinja", TEMPLATES[i]);
            if (file_read_all(path, &src, &n, &e) < 0) {
                fprintf(stderr, "fuzz_chat_tools: %s: %s (run from the repository root)\n", path, e.msg);
                abort();
            }
        }
        err_t e = {0};
        if (chat_tmpl_new(src, &g_tmpl[i].chat, &e) < 0) {
            fprintf(stderr, "fuzz_chat_tools: template %d: %s\n", i, e.msg);
            abort();
        }
        bool fallback = chat_tmpl_fallback_reason(g_tmpl[i].chat) != NULL;
        g_tmpl[i].format = fallback ? TC_GENERIC : tc_detect(src);
        g_tmpl[i].reasoning = !fallback && src && strstr(src, "<think>");
        free(src);
    }
    g_ready = true;
}

typedef struct text {
    char *p;
    size_t n;
} text;

static void add(text *t, const char *s, size_t k) {
    t->p = realloc(t->p, t->n + k + 1);
    if (k) memcpy(t->p + t->n, s, k);
    t->n += k;
    t->p[t->n] = 0;
}

/* Everything the parser reported, in one text: content and reasoning
 * concatenated, then per call index its name and argument pieces. */
static void parse(tc_format f, bool reasoning, const char *s, size_t n, uint64_t rng, text *out) {
    tc_parser *p = tc_parser_new(f, true, reasoning, false, 42);
    tc_events ev = {0};
    for (size_t at = 0; at < n;) {
        size_t k = n - at;
        if (rng) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            k = MIN(k, 1 + rng % 16);
        }
        tc_parser_feed(p, s + at, k, &ev);
        at += k;
    }
    int n_calls = tc_parser_finish(p, false, &ev);
    text parts[2] = {{0}, {0}};
    int n_started = 0;
    for (int i = 0; i < ev.n; i++) {
        const tc_event *e = &ev.v[i];
        if (e->kind == TC_EV_CONTENT || e->kind == TC_EV_REASONING) add(&parts[e->kind == TC_EV_REASONING], e->text, e->n);
        if (e->kind == TC_EV_CALL_START) n_started++;
    }
    char head[64];
    snprintf(head, sizeof head, "%d calls, %d started\n", n_calls, n_started);
    add(out, head, strlen(head));
    add(out, parts[0].p ? parts[0].p : "", parts[0].n);
    add(out, "\n--\n", 4);
    add(out, parts[1].p ? parts[1].p : "", parts[1].n);
    for (int c = 0; c < n_started; c++) {
        add(out, "\n--\n", 4);
        for (int i = 0; i < ev.n; i++) {
            const tc_event *e = &ev.v[i];
            if (e->index != c) continue;
            if (e->kind == TC_EV_CALL_START) add(out, e->name, strlen(e->name)), add(out, "\t", 1);
            else if (e->kind == TC_EV_CALL_ARGS) add(out, e->text, e->n);
        }
    }
    free(parts[0].p);
    free(parts[1].p);
    tc_events_free(&ev);
    tc_parser_free(p);
}

/* The parser gives the same result for the text whole and in pieces. */
static void parse_both(tc_format f, bool reasoning, const char *s, size_t n) {
    if (n > 8192) n = 8192; /* the parsers are quadratic in nothing, but keep each input fast */
    text a = {0}, b = {0};
    parse(f, reasoning, s, n, 0, &a);
    parse(f, reasoning, s, n, 0x9e3779b97f4a7c15ull ^ n, &b);
    if (a.n != b.n || memcmp(a.p, b.p, a.n) != 0) {
        fprintf(stderr, "fuzz_chat_tools: format %s: pieces change the result\nwhole:\n%s\npieces:\n%s\n",
                tc_format_name(f), a.p, b.p);
        abort();
    }
    free(a.p);
    free(b.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    if (!g_ready) init();
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(body)) {
        json_decref(body);
        for (int f = TC_NONE; f <= TC_GENERIC; f++) parse_both((tc_format)f, f & 1, (const char *)data, size);
        return 0;
    }
    json_t *msgs = json_object_get(body, "messages");
    json_t *tools = json_object_get(body, "tools");
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    json_t *agp = json_object_get(body, "add_generation_prompt");
    chat_opts o = {0};
    o.bos_token = "<s>";
    o.eos_token = "</s>";
    o.add_generation_prompt = !json_is_false(agp);
    o.tools = json_is_array(tools) ? tools : NULL;
    o.extra = json_is_object(kw) ? kw : NULL;
    unsigned parsed = 0;
    for (int i = 0; i < N_TMPL && msgs; i++) {
        const tmpl *t = &g_tmpl[i];
        char *out = NULL;
        err_t e = {0};
        int r = chat_render(t->chat, msgs, &o, &out, &e);
        if (r == 0) {
            if (!out) abort(); /* success gives the text */
            parse_both(t->format, t->reasoning, out, strlen(out));
            free(out);
        } else if (out || !e.msg[0]) {
            fprintf(stderr, "fuzz_chat_tools: a failed render left text or no message (%d)\n", r);
            abort();
        }
        /* the assistant turns as if generated, once per parser setup */
        unsigned bit = 1u << (t->format * 2 + t->reasoning);
        if (parsed & bit) continue;
        parsed |= bit;
        for (size_t m = 0; m < json_array_size(msgs); m++) {
            json_t *msg = json_array_get(msgs, m);
            json_t *role = json_object_get(msg, "role"), *c = json_object_get(msg, "content");
            if (json_is_string(role) && !strcmp(json_string_value(role), "assistant") && json_is_string(c))
                parse_both(t->format, t->reasoning, json_string_value(c), json_string_length(c));
        }
    }
    json_decref(body);
    return 0;
}
