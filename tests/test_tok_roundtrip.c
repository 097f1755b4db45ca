/*
 * test_tok_roundtrip.c — decode(encode(s)) == s for random valid UTF-8 on
 * SentencePiece and byte-level BPE vocabularies, and the streaming
 * detokenizer (ids pushed one by one) equals the whole decode and never
 * emits part of a UTF-8 character.
 *
 * Strings mix ASCII words, digit runs, long whitespace runs (spaces, tabs,
 * newlines, CR), punctuation, accented Latin, Cyrillic, CJK, Hangul, emoji
 * (4-byte, with ZWJ and skin tones), combining marks and a few special-token
 * lookalikes (as plain text, parse_special off). SPM strings are encoded
 * with BOS so the decoder's dummy-prefix rule applies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tok/hfimport.h"
#include "tok/tok.h"
#include "tok/unicode.h"

static uint32_t rnd(void) { return (uint32_t)(rng_u64() >> 16); } /* test.h's xorshift */
static uint32_t pick(uint32_t n) { return rnd() % n; }

static void put_cp(char *buf, int *n, uint32_t cp) { *n += utf8_encode(cp, buf + *n); }

/* Appends one random chunk; keeps total under cap-64. */
static void random_chunk(char *buf, int *n, bool lookalikes) {
    static const char *words[] = {"hello", "The", "world", "don't", "I'm", "we'll", "THEY'RE", "ok", "a", "foo_bar",
                                  "x=y+1;", "http://example.com/a?b=c", "<div>", "'s", "__init__"};
    static const char *specials[] = {"<|im_end|>", "<|endoftext|>", "</s>", "<s>", "<|eot_id|>", "<think>"};
    static const uint32_t marks[] = {0x300, 0x301, 0x308, 0x323, 0x35C, 0x20DD};
    static const uint32_t emoji[] = {0x1F600, 0x1F44D, 0x1F3FD, 0x200D, 0x2764, 0xFE0F, 0x1F680, 0x1F9D1};
    switch (pick(lookalikes ? 12 : 11)) {
    case 0: /* a word */
    case 1: {
        const char *w = words[pick(ARRAY_LEN(words))];
        memcpy(buf + *n, w, strlen(w));
        *n += (int)strlen(w);
        break;
    }
    case 2: { /* whitespace run */
        int k = 1 + (int)pick(pick(4) == 0 ? 40 : 4);
        for (int i = 0; i < k; i++) buf[(*n)++] = " \t\n\r  "[pick(6)];
        break;
    }
    case 3: { /* digits */
        int k = 1 + (int)pick(12);
        for (int i = 0; i < k; i++) buf[(*n)++] = (char)('0' + pick(10));
        break;
    }
    case 4: { /* punctuation / symbols */
        int k = 1 + (int)pick(4);
        for (int i = 0; i < k; i++) buf[(*n)++] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"[pick(32)];
        break;
    }
    case 5: { /* Latin-1 / accented, Cyrillic, Greek */
        int k = 1 + (int)pick(6);
        for (int i = 0; i < k; i++) {
            uint32_t r = pick(3);
            put_cp(buf, n, r == 0 ? 0xC0 + pick(0x40) : r == 1 ? 0x410 + pick(0x40) : 0x3B1 + pick(24));
        }
        break;
    }
    case 6: { /* CJK and Hangul */
        int k = 1 + (int)pick(6);
        for (int i = 0; i < k; i++) put_cp(buf, n, pick(2) ? 0x4E00 + pick(0x5000) : 0xAC00 + pick(0x2B00));
        break;
    }
    case 7: { /* emoji sequences */
        int k = 1 + (int)pick(4);
        for (int i = 0; i < k; i++) put_cp(buf, n, emoji[pick(ARRAY_LEN(emoji))]);
        break;
    }
    case 8: /* letter + combining marks */
        buf[(*n)++] = (char)('a' + pick(26));
        for (int i = 0, k = 1 + (int)pick(3); i < k; i++) put_cp(buf, n, marks[pick(ARRAY_LEN(marks))]);
        break;
    case 9: /* any non-surrogate BMP or astral code point, sometimes odd */
        for (;;) {
            uint32_t cp = pick(4) ? 0x80 + pick(0xFF80) : 0x10000 + pick(0x100000);
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            put_cp(buf, n, cp);
            break;
        }
        break;
    case 10:
        buf[(*n)++] = ' ';
        break;
    default: { /* a special-token lookalike, as text */
        const char *w = specials[pick(ARRAY_LEN(specials))];
        memcpy(buf + *n, w, strlen(w));
        *n += (int)strlen(w);
        break;
    }
    }
}

static int n_strings;

/* Encodes, decodes and streams `s`; returns true when everything matched. */
static bool roundtrip_one(const tokenizer *t, const char *s, int len, bool spm) {
    static int32_t ids[1 << 16];
    static char out[1 << 18], sbuf[1 << 18];
    int n = tok_encode(t, s, (size_t)len, spm, false, ids, 1 << 16);
    if (n < 0 || n > (1 << 16)) return false;
    int dl = tok_decode(t, ids, n, true, out, (int)sizeof out);
    bool ok = dl == len && memcmp(out, s, (size_t)len) == 0;
    if (!ok) {
        fprintf(stderr, "roundtrip mismatch (%d ids):\n  in : '%.*s'\n  out: '%.*s'\n", n, len, s, dl > 0 ? dl : 0,
                out);
        return false;
    }
    /* streaming: same bytes, each chunk whole characters */
    tok_stream st;
    tok_stream_init(&st, t, true);
    int cap = tok_stream_max_out(t), sl = 0;
    for (int i = 0; i <= n; i++) {
        int k = i < n ? tok_stream_push(&st, ids[i], sbuf + sl, cap) : tok_stream_flush(&st, sbuf + sl, cap);
        if (k < 0) return false;
        for (int o = 0; o < k;) {
            int c = utf8_check(sbuf + sl + o, (size_t)(k - o));
            if (c <= 0) {
                fprintf(stderr, "stream chunk %d is not whole UTF-8\n", i);
                return false;
            }
            o += c;
        }
        sl += k;
    }
    if (sl != dl || memcmp(sbuf, out, (size_t)dl) != 0) {
        fprintf(stderr, "stream != decode\n");
        return false;
    }
    return true;
}

/* A byte-level vocabulary may lack the character of some bytes (e.g. the
 * lead bytes of rare planes in starcoder and falcon); text with such bytes
 * cannot round-trip (the reference drops them too), so it is not generated. */
static bool representable(const tokenizer *t, bool spm, const char *s, int n) {
    if (spm) return true;
    for (int i = 0; i < n; i++) {
        char u[5] = {0};
        utf8_encode(unicode_byte_to_cp((uint8_t)s[i]), u);
        if (tok_find(t, u) < 0) return false;
    }
    return true;
}

static void run(const char *name, const tokenizer *t, bool spm, int count) {
    char buf[4096];
    int ok = 0, skipped = 0;
    for (int i = 0; i < count; i++) {
        int n = 0, chunks = 1 + (int)pick(40);
        for (int c = 0; c < chunks && n < (int)sizeof buf - 128; c++) random_chunk(buf, &n, !spm);
        if (!representable(t, spm, buf, n) && skipped < 10 * count) {
            skipped++;
            i--;
            continue;
        }
        bool r = roundtrip_one(t, buf, n, spm);
        CHECK_MSG(r, "%s string %d", name, i);
        ok += r;
        n_strings++;
    }
    /* long whitespace and long repeated runs */
    static char big[20000];
    for (int k = 0; k < 3; k++) {
        int n = 0;
        const char *unit = k == 0 ? " " : k == 1 ? "\n\n \t" : "ab1 ";
        while (n < 16000) {
            memcpy(big + n, unit, strlen(unit));
            n += (int)strlen(unit);
        }
        bool r = roundtrip_one(t, big, n, spm);
        CHECK_MSG(r, "%s long run %d", name, k);
        ok += r;
    }
    printf("  %-16s %d/%d roundtrips (%d strings with bytes the vocab lacks skipped)\n", name, ok, count + 3,
           skipped);
}

static tokenizer *load_gguf(const char *path) {
    gguf_ctx *g = NULL;
    err_t e = {0};
    tokenizer *t = NULL;
    if (gguf_open(path, &g, &e) == 0) {
        if (tok_load(g, &t, &e) < 0) t = NULL;
        gguf_free(g);
    }
    CHECK_MSG(t != NULL, "%s: %s", path, e.msg);
    return t;
}

static tokenizer *load_hf(const char *dir) {
    char tj[512], out[256];
    snprintf(tj, sizeof tj, "%s/tokenizers/%s/tokenizer.json", test_shared_dir(), dir);
    snprintf(out, sizeof out, "/tmp/kvloom_test_tokrt_%d.gguf", (int)getpid());
    gguf_writer *w = gguf_writer_new();
    err_t e = {0};
    tokenizer *t = NULL;
    if (tok_import_hf(tj, NULL, w, &e) == 0 && gguf_writer_write(w, out, &e) == 0) t = load_gguf(out);
    CHECK_MSG(t != NULL, "%s: %s", dir, e.msg);
    gguf_writer_free(w);
    unlink(out);
    return t;
}

int main(void) {
    static const struct {
        const char *vocab;
        bool spm;
    } v[] = {{"llama-spm", true}, {"phi-3", true},       {"gpt-2", false},    {"deepseek-llm", false},
             {"falcon", false},   {"starcoder", false},  {"deepseek-coder", false},
             {"baichuan", true},  {"gpt-neox", false},   {"mpt", false},      {"refact", false}};
    char path[512];
    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), v[i].vocab);
        tokenizer *t = load_gguf(path);
        if (!t) continue;
        run(v[i].vocab, t, v[i].spm, 150);
        tok_free(t);
    }
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    tokenizer *t = load_gguf(path);
    if (t) {
        run("stories260K", t, true, 200);
        tok_free(t);
    }
    static const char *hf[] = {"llama3", "qwen3"};
    for (size_t i = 0; i < ARRAY_LEN(hf); i++) {
        t = load_hf(hf[i]);
        if (!t) continue;
        run(hf[i], t, false, 200);
        tok_free(t);
    }
    printf("  %d random strings\n", n_strings);
    return test_summary("test_tok_roundtrip");
}
