/*
 * fuzz_tok.c — libFuzzer target for the tokenizers and the tokenizer.json
 * importer.
 *
 * Input: byte 0 selects the case, the rest is the payload.
 *   bits 0-3  0 llama-spm, 1 deepseek-llm, 2 falcon, 3 gpt-2, 4 starcoder,
 *             5 qwen3 (imported), 6 stories260K, 7 bert-bge,
 *             8 deepseek-coder; 15 = importer; others wrap around
 *   bit 4     parse_special;  bit 5  add_bos
 * For a vocabulary: encode the payload (any bytes), check the count/fill
 * protocol, decode whole and streamed, and trap unless both agree and the
 * text is valid UTF-8. For 7: import the payload as tokenizer.json (error
 * returns are fine; crashes and leaks are not).
 * Vocabularies are loaded once, in LLVMFuzzerInitialize, from
 * $KVLOOM_SHARED or ../shared; missing ones are skipped.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok/hfimport.h"
#include "tok/tok.h"
#include "tok/unicode.h"

#define N_VOCABS 9

static tokenizer *g_tok[N_VOCABS];

static const char *shared_dir(void) {
    const char *s = getenv("KVLOOM_SHARED");
    return s && *s ? s : "../shared";
}

static tokenizer *load_path(const char *path) {
    gguf_ctx *g = NULL;
    tokenizer *t = NULL;
    err_t e;
    if (gguf_open(path, &g, &e) == 0) {
        if (tok_load(g, &t, &e) < 0) t = NULL;
        gguf_free(g);
    }
    return t;
}

static void load_all(void) {
    static const char *names[] = {"llama-spm", "deepseek-llm", "falcon", "gpt-2", "starcoder"};
    char path[512];
    log_level = LOG_ERROR;
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), names[i]);
        g_tok[i] = load_path(path);
    }
    char tj[512], out[256];
    snprintf(tj, sizeof tj, "%s/tokenizers/qwen3/tokenizer.json", shared_dir());
    snprintf(out, sizeof out, "/tmp/kvloom_fuzz_tok_%d.gguf", (int)getpid());
    gguf_writer *w = gguf_writer_new();
    err_t e;
    if (tok_import_hf(tj, NULL, w, &e) == 0 && gguf_writer_write(w, out, &e) == 0) g_tok[5] = load_path(out);
    gguf_writer_free(w);
    unlink(out);
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared_dir());
    g_tok[6] = load_path(path);
    static const char *more[] = {"bert-bge", "deepseek-coder"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), more[i]);
        g_tok[7 + i] = load_path(path);
    }
}

static void check_utf8(const char *s, int n) {
    for (int o = 0; o < n;) {
        int c = utf8_check(s + o, (size_t)(n - o));
        if (c <= 0) __builtin_trap();
        o += c;
    }
}

static void run_vocab(const tokenizer *t, const char *text, size_t len, bool special, bool bos) {
    int need = tok_encode(t, text, len, bos, special, NULL, 0);
    if (need < 0) __builtin_trap();
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(need + 1));
    int again = tok_encode(t, text, len, bos, special, ids, need);
    if (again != need) __builtin_trap();
    for (int i = 0; i < need; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(t)) __builtin_trap();
    for (int skip = 0; skip < 2; skip++) {
        int dl = tok_decode(t, ids, need, skip, NULL, 0);
        if (dl < 0) __builtin_trap();
        char *out = malloc((size_t)dl + 1);
        if (tok_decode(t, ids, need, skip, out, dl + 1) != dl) __builtin_trap();
        check_utf8(out, dl);
        /* streamed one id at a time equals the whole decode */
        tok_stream st;
        tok_stream_init(&st, t, skip);
        int cap = tok_stream_max_out(t);
        char *chunk = malloc((size_t)cap);
        int pos = 0;
        for (int i = 0; i <= need; i++) {
            int k = i < need ? tok_stream_push(&st, ids[i], chunk, cap) : tok_stream_flush(&st, chunk, cap);
            if (k < 0 || pos + k > dl || memcmp(out + pos, chunk, (size_t)k) != 0) __builtin_trap();
            check_utf8(chunk, k);
            pos += k;
        }
        if (pos != dl) __builtin_trap();
        free(chunk);
        free(out);
    }
    free(ids);
}

/* libFuzzer calls this once before any input (replay.c too), so the nine
 * vocabularies' load is not counted against the first input's time limit. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    load_all();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0] & 15;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (sel == 15) {
        gguf_writer *w = gguf_writer_new();
        err_t e;
        tok_import_hf_mem(text, len, NULL, 0, w, &e);
        gguf_writer_free(w);
        return 0;
    }
    sel %= N_VOCABS;
    if (g_tok[sel]) run_vocab(g_tok[sel], text, len, (data[0] & 16) != 0, (data[0] & 32) != 0);
    return 0;
}
