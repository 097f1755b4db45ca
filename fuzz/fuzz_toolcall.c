/*
 * fuzz_toolcall.c — libFuzzer target for chat/toolcall: the streaming output
 * parser and the `tools` checks and grammars.
 *
 * Parser: byte 0 picks the format (bits 0-2, mod 5), tools on (bit 3),
 * reasoning (bit 4) and think_open (bit 5); byte 1 seeds the piece sizes;
 * the rest is the model output, fed once whole and once in pieces of 1..16
 * bytes. The two runs must give the same content, reasoning, calls and
 * count (else abort), and nothing may crash, leak or assert.
 * Tools: when the whole input is JSON it goes through tc_check_tools,
 * tc_generic_system_prompt and, when valid, tc_grammar for every format
 * (lazy and not), whose text is compiled with grammar_from_gbnf (an
 * undefined rule aborts).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/toolcall.h"
#include "grammar/grammar.h"

typedef struct fold {
    char *text[2]; /* content, reasoning */
    size_t n[2];
    char *calls; /* "index name\targs\n" per event, in order of call index */
    size_t n_calls_text;
    int count;
} fold;

static void add(char **s, size_t *n, const char *t, size_t k) {
    *s = realloc(*s, *n + k + 1);
    if (k) memcpy(*s + *n, t, k);
    *n += k;
    (*s)[*n] = 0;
}

/* Content and reasoning concatenated; call events rendered per index (the
 * pieces of one call's arguments concatenated). */
static void fold_events(fold *f, const tc_events *ev) {
    int n_started = 0;
    for (int i = 0; i < ev->n; i++)
        if (ev->v[i].kind == TC_EV_CALL_START) n_started++;
    for (int i = 0; i < ev->n; i++) {
        const tc_event *e = &ev->v[i];
        if (e->kind == TC_EV_CONTENT || e->kind == TC_EV_REASONING) add(&f->text[e->kind], &f->n[e->kind], e->text, e->n);
    }
    for (int c = 0; c < n_started; c++) {
        char head[32];
        snprintf(head, sizeof head, "%d ", c);
        add(&f->calls, &f->n_calls_text, head, strlen(head));
        for (int i = 0; i < ev->n; i++) {
            const tc_event *e = &ev->v[i];
            if (e->index != c) continue;
            if (e->kind == TC_EV_CALL_START) {
                add(&f->calls, &f->n_calls_text, e->name, strlen(e->name));
                add(&f->calls, &f->n_calls_text, "\t", 1);
            } else if (e->kind == TC_EV_CALL_ARGS) {
                add(&f->calls, &f->n_calls_text, e->text, e->n);
            }
        }
        add(&f->calls, &f->n_calls_text, "\n", 1);
    }
}

static void run(const uint8_t *data, size_t size, bool pieces, fold *f) {
    uint8_t mode = data[0];
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ data[1];
    tc_parser *p = tc_parser_new((tc_format)((mode & 7) % 5), mode & 8, mode & 16, mode & 32, 1234);
    tc_events ev = {0};
    const char *text = (const char *)data + 2;
    size_t n = size - 2, at = 0;
    while (at < n) {
        size_t k = n - at;
        if (pieces) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            k = MIN(k, 1 + rng % 16);
        }
        tc_parser_feed(p, text + at, k, &ev);
        at += k;
    }
    f->count = tc_parser_finish(p, mode & 64, &ev);
    fold_events(f, &ev);
    tc_events_free(&ev);
    tc_parser_free(p);
}

static bool same_str(const char *a, size_t na, const char *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na) == 0);
}

static void fuzz_parser(const uint8_t *data, size_t size) {
    fold a = {0}, b = {0};
    run(data, size, false, &a);
    run(data, size, true, &b);
    if (a.count != b.count || !same_str(a.text[0], a.n[0], b.text[0], b.n[0]) ||
        !same_str(a.text[1], a.n[1], b.text[1], b.n[1]) ||
        !same_str(a.calls, a.n_calls_text, b.calls, b.n_calls_text)) {
        fprintf(stderr, "fuzz_toolcall: pieces change the result\n");
        abort();
    }
    for (int i = 0; i < 2; i++) free(a.text[i]), free(b.text[i]);
    free(a.calls);
    free(b.calls);
}

static void fuzz_tools(json_t *tools) {
    err_t e = {0};
    char *sys = tc_generic_system_prompt(tools);
    free(sys);
    if (tc_check_tools(tools, &e) < 0) return;
    for (int f = TC_NONE; f <= TC_GENERIC; f++) {
        for (int mode = 0; mode < 4; mode++) {
            char *gbnf = NULL, *trigger = NULL;
            if (tc_grammar((tc_format)f, tools, NULL, mode & 1, mode & 2, &gbnf, &trigger, &e) == 0) {
                grammar *g = NULL;
                if (grammar_from_gbnf(gbnf, strlen(gbnf), &g, &e) != 0) {
                    /* limits may refuse a huge schema's grammar, but every
                     * rule it names must be defined */
                    if (strstr(e.msg, "undefined rule")) {
                        fprintf(stderr, "fuzz_toolcall: grammar does not compile: %s\n%s\n", e.msg, gbnf);
                        abort();
                    }
                }
                grammar_unref(g);
            }
            free(gbnf);
            free(trigger);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (o) {
        fuzz_tools(o);
        json_decref(o);
    }
    if (size >= 2) fuzz_parser(data, size);
    return 0;
}
