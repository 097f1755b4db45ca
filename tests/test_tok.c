/*
 * test_tok.c — tokenizers against the reference test vectors in
 * ../shared/vocab (*.gguf.inp / *.gguf.out, produced by the Hugging Face
 * tokenizers), plus unit checks of pieces, special tokens, EOG detection,
 * streaming and the tokenizer.json importer.
 *
 * Vector format: inputs separated by "\n__ggml_vocab_test__\n" (the file ends
 * with a separator); .out has one line of space-separated ids per input,
 * encoded without BOS and without parsing special tokens.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "tok/hfimport.h"
#include "tok/tok.h"
#include "test.h"

static char *slurp(const char *path, size_t *n) {
    char *buf = NULL;
    err_t e;
    if (file_read_all(path, &buf, n, &e) < 0) return NULL;
    return buf;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Runs every vector of `name` against tokenizer t; returns failures. */
static int run_vectors(const char *name, const tokenizer *t) {
    char path[512];
    size_t ni, no;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", test_shared_dir(), name);
    char *inp = slurp(path, &ni);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", test_shared_dir(), name);
    char *outp = slurp(path, &no);
    CHECK_MSG(inp && outp, "vectors for %s", name);
    if (!inp || !outp) {
        free(inp);
        free(outp);
        return 1;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep);
    char *p = inp, *end = inp + ni;
    char *line = outp, *oend = outp + no;
    int n_case = 0, n_ok = 0;
    int32_t *ids = malloc(sizeof(int32_t) * 65536), *want = malloc(sizeof(int32_t) * 65536);
    while (p < end) {
        char *q = memmem(p, (size_t)(end - p), sep, sl);
        if (!q) break;
        size_t len = (size_t)(q - p);
        /* expected ids: one line */
        char *nl = memchr(line, '\n', (size_t)(oend - line));
        if (!nl) nl = oend;
        int nw = 0;
        for (char *s = line; s < nl;) {
            char *x;
            long v = strtol(s, &x, 10);
            if (x == s) break;
            want[nw++] = (int32_t)v;
            s = x;
        }
        line = nl < oend ? nl + 1 : oend;
        int n = tok_encode(t, p, len, false, false, ids, 65536);
        bool ok = n == nw && memcmp(ids, want, sizeof(int32_t) * (size_t)nw) == 0;
        n_case++;
        if (ok) {
            n_ok++;
        } else {
            fprintf(stderr, "MISMATCH %s case %d input '%.*s'\n", name, n_case, (int)len, p);
            print_ids("got ", ids, n > 0 ? MIN(n, 65536) : 0);
            print_ids("want", want, nw);
        }
        CHECK(ok);
        p = q + sl;
    }
    printf("  %-16s %d/%d vectors\n", name, n_ok, n_case);
    CHECK_MSG(n_case >= 40, "%s: only %d cases parsed", name, n_case);
    free(ids);
    free(want);
    free(inp);
    free(outp);
    return n_case - n_ok;
}

static tokenizer *load_vocab(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    gguf_ctx *g = NULL;
    err_t e = {0};
    int rc = gguf_open(path, &g, &e);
    CHECK_MSG(rc == 0, "gguf_open %s: %s", path, e.msg);
    if (rc) return NULL;
    tokenizer *t = NULL;
    rc = tok_load(g, &t, &e);
    CHECK_MSG(rc == 0, "tok_load %s: %s", name, e.msg);
    gguf_free(g);
    return t;
}

/* Imports tokenizers/<dir>/tokenizer.json (+ config) into a temporary GGUF
 * and loads it. */
static int encode(const tokenizer *t, const char *s, bool bos, bool special, int32_t *ids, int cap) {
    return tok_encode(t, s, strlen(s), bos, special, ids, cap);
}

/* stories260K: prompt ids and decoded text of models/expected_greedy.json
 * (computed by an independent numpy/llama2.c reference). */
static void check_stories(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    gguf_ctx *g = NULL;
    err_t e = {0};
    int rc = gguf_open(path, &g, &e);
    CHECK_MSG(rc == 0, "%s: %s", path, e.msg);
    if (rc) return;
    tokenizer *t = NULL;
    rc = tok_load(g, &t, &e);
    gguf_free(g);
    CHECK_MSG(rc == 0, "tok_load stories: %s", e.msg);
    if (rc) return;
    CHECK_EQ_INT(tok_n_vocab(t), 512);
    CHECK_EQ_INT(tok_bos(t), 1);
    CHECK_EQ_INT(tok_eos(t), 2);
    CHECK(tok_add_bos(t));
    CHECK(tok_is_eog(t, 2));
    CHECK(!tok_is_eog(t, 1));
    CHECK_STR(tok_model_name(t), "llama");
    snprintf(path, sizeof path, "%s/models/expected_greedy.json", test_shared_dir());
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    json_t *cases = json_object_get(root, "cases");
    size_t i;
    json_t *c;
    int n_ok = 0, n_case = 0;
    json_array_foreach(cases, i, c) {
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        json_t *pids = json_object_get(c, "prompt_ids"), *oids = json_object_get(c, "output_ids");
        const char *text = json_string_value(json_object_get(c, "text"));
        if (!prompt || !pids || !oids) continue;
        n_case++;
        int32_t ids[4096];
        int n = encode(t, prompt, true, false, ids, 4096);
        bool ok = n == (int)json_array_size(pids);
        for (int k = 0; ok && k < n; k++) ok = ids[k] == json_integer_value(json_array_get(pids, (size_t)k));
        CHECK_MSG(ok, "stories prompt '%s'", prompt);
        /* decode BOS + output ids with the streaming rule */
        int no = (int)json_array_size(oids);
        int32_t *all = malloc(sizeof(int32_t) * (size_t)(no + 1));
        all[0] = 1;
        for (int k = 0; k < no; k++) all[k + 1] = (int32_t)json_integer_value(json_array_get(oids, (size_t)k));
        char buf[16384];
        int len = tok_decode(t, all, no + 1, true, buf, sizeof buf);
        if (text) {
            bool tok_ok = len == (int)strlen(text) && memcmp(buf, text, (size_t)len) == 0;
            CHECK_MSG(tok_ok, "stories decode: got '%.*s' want '%s'", len > 0 ? len : 0, buf, text);
            ok = ok && tok_ok;
        }
        /* streaming one by one equals whole decode */
        tok_stream st;
        tok_stream_init(&st, t, true);
        char sbuf[16384];
        int sl = 0;
        for (int k = 0; k < no + 1; k++) sl += tok_stream_push(&st, all[k], sbuf + sl, (int)sizeof sbuf - sl);
        sl += tok_stream_flush(&st, sbuf + sl, (int)sizeof sbuf - sl);
        CHECK(sl == len && memcmp(sbuf, buf, (size_t)len) == 0);
        free(all);
        n_ok += ok;
    }
    printf("  %-16s %d/%d expected_greedy cases\n", "stories260K", n_ok, n_case);
    CHECK(n_case >= 1);
    json_decref(root);
    tok_free(t);
}

/* Pieces, special tokens, EOG, streaming of split characters (llama-spm). */
static void check_units_spm(tokenizer *t) {
    char buf[64];
    CHECK_EQ_INT(tok_piece(t, tok_find(t, "<0x0A>"), buf, sizeof buf), 1);
    CHECK(buf[0] == '\n');
    int32_t hello = tok_find(t, "\xe2\x96\x81Hello");
    CHECK(hello > 0);
    CHECK_EQ_INT(tok_piece(t, hello, buf, sizeof buf), 6);
    CHECK(memcmp(buf, " Hello", 6) == 0);
    CHECK_STR(tok_piece_str(t, hello), "\xe2\x96\x81Hello");
    CHECK_EQ_INT(tok_piece(t, -1, buf, 4), ERR_INVALID);
    CHECK_EQ_INT(tok_piece(t, tok_n_vocab(t), buf, 4), ERR_INVALID);
    CHECK(tok_piece_str(t, 1 << 30) == NULL);
    CHECK(tok_is_special(t, 1) && tok_is_special(t, 2) && !tok_is_special(t, hello));
    /* "</s>" is text without parse_special, one token with it */
    int32_t ids[64];
    int n = encode(t, "a</s>b", false, true, ids, 64);
    CHECK(n >= 3);
    bool has_eos = false;
    for (int i = 0; i < n; i++) has_eos |= ids[i] == 2;
    CHECK(has_eos);
    n = encode(t, "a</s>b", false, false, ids, 64);
    has_eos = false;
    for (int i = 0; i < n; i++) has_eos |= ids[i] == 2;
    CHECK(!has_eos && n > 3);
    /* count-then-fill protocol */
    int need = encode(t, "Hello world, this is a test", true, false, NULL, 0);
    CHECK(need > 3);
    n = encode(t, "Hello world, this is a test", true, false, ids, 2);
    CHECK_EQ_INT(n, need);
    CHECK_EQ_INT(ids[0], 1);
    /* a character split over byte tokens is held until complete */
    const char *euro = "\xe2\x82\xac"; /* € is byte-fallback in llama-spm? use the bytes */
    int32_t b0 = tok_find(t, "<0xE2>"), b1 = tok_find(t, "<0x82>"), b2 = tok_find(t, "<0xAC>");
    tok_stream s;
    tok_stream_init(&s, t, true);
    char out[64];
    CHECK_EQ_INT(tok_stream_push(&s, b0, out, sizeof out), 0);
    CHECK_EQ_INT(tok_stream_push(&s, b1, out, sizeof out), 0);
    CHECK_EQ_INT(tok_stream_push(&s, b2, out, sizeof out), 3);
    CHECK(memcmp(out, euro, 3) == 0);
    /* an interrupted character becomes U+FFFD, then the text continues */
    CHECK_EQ_INT(tok_stream_push(&s, b0, out, sizeof out), 0);
    int k = tok_stream_push(&s, hello, out, sizeof out);
    CHECK_EQ_INT(k, 9);
    CHECK(memcmp(out, "\xef\xbf\xbd Hello", 9) == 0);
    CHECK_EQ_INT(tok_stream_push(&s, b0, out, sizeof out), 0);
    CHECK_EQ_INT(tok_stream_push(&s, b0, out, 2), ERR_RANGE); /* would need 3 bytes */
    CHECK_EQ_INT(tok_stream_flush(&s, out, sizeof out), 3);
    CHECK(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CHECK_EQ_INT(tok_stream_flush(&s, out, sizeof out), 0);
    CHECK_EQ_INT(tok_stream_push(&s, -5, out, sizeof out), ERR_INVALID);
    /* BOS drops the dummy-prefix space; without BOS the space stays */
    int32_t seq[2] = {1, hello};
    CHECK_EQ_INT(tok_decode(t, seq, 2, true, out, sizeof out), 5);
    CHECK_STR(out, "Hello");
    CHECK_EQ_INT(tok_decode(t, seq + 1, 1, true, out, sizeof out), 6);
    CHECK_STR(out, " Hello");
    CHECK_EQ_INT(tok_decode(t, seq, 2, false, out, sizeof out), 9);
    CHECK_STR(out, "<s> Hello");
    CHECK_EQ_INT(tok_decode(t, seq, 2, true, out, 3), 5); /* truncated, returns the need */
    CHECK(memcmp(out, "Hel", 3) == 0);
}

/* Byte-level checks on an imported llama3 and qwen3. */
static void check_units_bpe(tokenizer *l3, tokenizer *q3) {
    int32_t ids[64];
    char out[256];
    if (l3) {
        CHECK_STR(tok_pre_name(l3), "llama-bpe");
        CHECK_EQ_INT(tok_n_vocab(l3), 128256);
        CHECK_EQ_INT(tok_bos(l3), 128000);
        CHECK(tok_add_bos(l3));
        CHECK(tok_is_eog(l3, tok_find(l3, "<|eot_id|>")));
        CHECK(tok_is_eog(l3, tok_find(l3, "<|end_of_text|>")));
        CHECK(!tok_is_eog(l3, tok_find(l3, "<|start_header_id|>")));
        CHECK(tok_chat_template(l3) != NULL);
        int n = encode(l3, "<|start_header_id|>user<|end_header_id|>", false, true, ids, 64);
        CHECK_EQ_INT(n, 3);
        CHECK_EQ_INT(ids[0], tok_find(l3, "<|start_header_id|>"));
        n = encode(l3, "<|start_header_id|>", false, false, ids, 64);
        CHECK(n > 1);
        CHECK_EQ_INT(tok_decode(l3, ids, n, true, out, sizeof out), 19);
        CHECK_STR(out, "<|start_header_id|>");
        n = encode(l3, "Hello", true, false, ids, 64);
        CHECK_EQ_INT(n, 2);
        CHECK_EQ_INT(ids[0], 128000);
        CHECK_EQ_INT(tok_decode(l3, ids, n, true, out, sizeof out), 5);
        CHECK_EQ_INT(tok_decode(l3, ids, n, false, out, sizeof out), 22);
        CHECK_STR(out, "<|begin_of_text|>Hello");
        CHECK_EQ_INT(tok_piece(l3, tok_find(l3, "\xc4\xa0the"), out, sizeof out), 4); /* Ġthe */
        CHECK(memcmp(out, " the", 4) == 0);
        /* invalid UTF-8 encodes like U+FFFD */
        int a = encode(l3, "x\xff", false, false, ids, 64);
        int32_t ids2[64];
        int b = encode(l3, "x\xef\xbf\xbd", false, false, ids2, 64);
        CHECK(a == b && memcmp(ids, ids2, sizeof(int32_t) * (size_t)a) == 0);
    }
    if (q3) {
        CHECK_STR(tok_pre_name(q3), "qwen2");
        CHECK_EQ_INT(tok_bos(q3), -1);
        CHECK(!tok_add_bos(q3));
        CHECK_EQ_INT(tok_eos(q3), tok_find(q3, "<|im_end|>"));
        CHECK(tok_is_eog(q3, tok_find(q3, "<|im_end|>")));
        CHECK(tok_is_eog(q3, tok_find(q3, "<|endoftext|>")));
        /* <think> is a user-defined added token: always one token */
        int n = encode(q3, "a<think>b", false, false, ids, 64);
        CHECK_EQ_INT(n, 3);
        CHECK_EQ_INT(ids[1], tok_find(q3, "<think>"));
        CHECK(tok_is_special(q3, ids[1]));
        /* <|im_start|> is control: text unless parse_special */
        n = encode(q3, "<|im_start|>", false, true, ids, 64);
        CHECK_EQ_INT(n, 1);
        n = encode(q3, "<|im_start|>", false, false, ids, 64);
        CHECK(n > 1);
        int32_t seq[3] = {tok_find(q3, "<|im_start|>"), 0, 0};
        n = encode(q3, "hi", false, false, seq + 1, 2);
        CHECK_EQ_INT(tok_decode(q3, seq, 1 + n, true, out, sizeof out), 2);
        CHECK_STR(out, "hi");
    }
}

/* Writes w to a temporary file, opens it and runs tok_load; returns its
 * code (the tokenizer in *out on success). */
static int load_written(gguf_writer *w, tokenizer **out, err_t *e) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/kvloom_test_tokm_%d.gguf", (int)getpid());
    *out = NULL;
    int rc = gguf_writer_write(w, path, e);
    gguf_writer_free(w);
    if (rc < 0) return 1000 + rc; /* writer failure: not what the test is about */
    gguf_ctx *g = NULL;
    rc = gguf_open(path, &g, e);
    unlink(path);
    if (rc < 0) return 2000 + rc;
    rc = tok_load(g, out, e);
    gguf_free(g);
    return rc;
}

/* Malformed tokenizer metadata is rejected with a message; a tiny
 * hand-made byte-level vocabulary checks merges through a string that is
 * not itself a token, duplicate strings and out-of-range special ids. */
static void check_metadata(void) {
    static const char *toks[] = {"a", "b", "c", "abc", "<|end|>", "b"};
    int32_t types[] = {1, 1, 1, 1, 3, 1};
    err_t e = {0};
    tokenizer *t;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 6);
    CHECK_EQ_INT(load_written(w, &t, &e), ERR_NOTFOUND);
    CHECK(strstr(e.msg, "tokenizer.ggml.model") != NULL);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 6);
    CHECK_EQ_INT(load_written(w, &t, &e), ERR_UNSUPPORTED);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_INT32, types, 6);
    CHECK_EQ_INT(load_written(w, &t, &e), ERR_NOTFOUND);
    CHECK(strstr(e.msg, "tokenizer.ggml.tokens") != NULL);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 6);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, (float[]){0, 0, 0}, 3);
    CHECK_EQ_INT(load_written(w, &t, &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "tokenizer.ggml.scores") != NULL);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 6);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *[]){"a b", "abc"}, NULL, 2);
    CHECK_EQ_INT(load_written(w, &t, &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "merges[1]") != NULL);

    /* "ab" is only a merge step: "abc" becomes one token, "ab" falls back to
     * the tokens of its bytes; "b" is duplicated, the last id wins; the bos
     * id is out of range, so there is none. */
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 6);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, 6);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *[]){"a b", "ab c"}, NULL, 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 99);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 4);
    int rc = load_written(w, &t, &e);
    CHECK_MSG(rc == 0, "tiny vocab: %s", e.msg);
    if (rc == 0) {
        int32_t ids[16];
        CHECK_EQ_INT(tok_bos(t), -1);
        CHECK(!tok_add_bos(t));
        CHECK_EQ_INT(tok_eos(t), 4);
        CHECK(tok_is_eog(t, 4));
        CHECK_EQ_INT(tok_find(t, "b"), 5);
        CHECK_EQ_INT(tok_find(t, "ab"), -1);
        CHECK_EQ_INT(encode(t, "abc", true, false, ids, 16), 1);
        CHECK_EQ_INT(ids[0], 3);
        CHECK_EQ_INT(encode(t, "ab", false, false, ids, 16), 2);
        CHECK(ids[0] == 0 && ids[1] == 5);
        CHECK_EQ_INT(encode(t, "a<|end|>c", false, true, ids, 16), 3);
        CHECK(ids[0] == 0 && ids[1] == 4 && ids[2] == 2);
        CHECK_EQ_INT(encode(t, "", true, true, ids, 16), 0);
        CHECK_EQ_INT(tok_encode(t, NULL, 0, false, false, NULL, 0), 0);
        CHECK_EQ_INT(tok_encode(NULL, "x", 1, false, false, NULL, 0), ERR_INVALID);
        tok_free(t);
    }
    tok_free(NULL);

    /* o200k_harmony's rule: with <|return|>, <|call|>, <|channel|> and
     * <|message|> present, <|end|> no longer ends generation and the header
     * tokens are user-defined (streamed as text, allowed in grammars); a
     * vocabulary without <|call|> keeps <|end|> as end of generation */
    static const char *hm[] = {"a", "b", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>",
                               "<|call|>", "<|constrain|>"};
    int32_t hm_types[] = {1, 1, 3, 3, 3, 3, 3, 3, 3};
    for (int with_call = 0; with_call < 2; with_call++) {
        w = gguf_writer_new();
        gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
        const char *names[9];
        memcpy(names, hm, sizeof hm);
        if (!with_call) names[7] = "<|calls|>";
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", names, NULL, 9);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, hm_types, 9);
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *[]){"a b"}, NULL, 1);
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 6);
        rc = load_written(w, &t, &e);
        CHECK_MSG(rc == 0, "harmony vocab: %s", e.msg);
        if (rc) continue;
        CHECK(tok_is_eog(t, 6));
        CHECK_EQ_INT(tok_is_eog(t, 3), !with_call);
        CHECK_EQ_INT(tok_type(t, 5), with_call ? TOK_TYPE_USER_DEFINED : TOK_TYPE_CONTROL);
        CHECK_EQ_INT(tok_type(t, 3), TOK_TYPE_CONTROL);
        if (with_call) {
            CHECK(tok_is_eog(t, 7));
            /* a stream that skips control tokens shows the header tokens */
            tok_stream st;
            tok_stream_init(&st, t, true);
            char out[64];
            size_t n = 0;
            const int32_t seq[] = {5, 0, 4, 1, 3, 2};
            for (size_t k = 0; k < ARRAY_LEN(seq); k++) {
                int r = tok_stream_push(&st, seq[k], out + n, (int)(sizeof out - n));
                if (r > 0) n += (size_t)r;
            }
            out[n] = 0;
            CHECK_STR(out, "<|channel|>a<|message|>b<|start|>");
        }
        tok_free(t);
    }

    /* importer rejections name the problem and leave the writer empty */
    static const struct {
        const char *json;
        int rc;
        const char *msg;
    } bad[] = {
        {"{\"model\": ", ERR_FORMAT, "JSON error"},
        {"[1]", ERR_FORMAT, "not an object"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", ERR_UNSUPPORTED, "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}}}", ERR_FORMAT, "model.vocab['a']"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\","
         " \"pattern\": {\"Regex\": \"x+\"}}, \"decoder\": {\"type\": \"ByteLevel\"}}",
         ERR_UNSUPPORTED, "regex not recognised"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}, \"decoder\": "
         "{\"type\": \"ByteLevel\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}}",
         ERR_FORMAT, "merges[0]"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        gguf_writer *wi = gguf_writer_new();
        err_t ei = {0};
        int r = tok_import_hf_mem(bad[i].json, strlen(bad[i].json), NULL, 0, wi, &ei);
        CHECK_MSG(r == bad[i].rc && strstr(ei.msg, bad[i].msg), "import case %zu: %d '%s'", i, r, ei.msg);
        gguf_writer_free(wi);
    }
}

/* ---- special-token split against a naive reference ------------------------
 * The reference splits the text with one memmem pass per special token,
 * longest first (ties by id), then encodes each remaining piece on its own
 * (a piece holds no special text any more, and for SentencePiece every piece
 * follows the start or a special token, so it gets the dummy prefix either
 * way). Texts are random mixes of special tokens, their prefixes and text. */
typedef struct rfrag {
    size_t off, len;
    int32_t tok;
} rfrag;

static int cmp_len_desc(const void *a, const void *b, void *arg) {
    const tokenizer *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = strlen(tok_piece_str(t, x)), ly = strlen(tok_piece_str(t, y));
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* phi-3's rule (reference): spaces after its special tokens are dropped,
 * except after <unk>, <s> and <|endoftext|>. */
static bool naive_rstrip(const tokenizer *t, bool phi3, int32_t id) {
    const char *s = tok_piece_str(t, id);
    return phi3 && strcmp(s, "<unk>") && strcmp(s, "<s>") && strcmp(s, "<|endoftext|>");
}

static int naive_encode(const tokenizer *t, const int32_t *sp, int n_sp, const char *text, size_t len, bool special,
                        bool phi3, int32_t *ids, int cap) {
    rfrag cur[4096], nxt[4096];
    int nc = 1, n = 0;
    cur[0] = (rfrag){0, len, -1};
    for (int k = 0; k < n_sp; k++) {
        int32_t id = sp[k];
        if (!special && tok_type(t, id) != TOK_TYPE_USER_DEFINED) continue;
        const char *s = tok_piece_str(t, id);
        size_t sl = strlen(s);
        int nn = 0;
        for (int f = 0; f < nc; f++) {
            if (cur[f].tok >= 0) {
                nxt[nn++] = cur[f];
                continue;
            }
            size_t base = cur[f].off, blen = cur[f].len;
            while (blen > 0) {
                const char *m = memmem(text + base, blen, s, sl);
                if (!m) break;
                size_t mp = (size_t)(m - text);
                if (mp > base) nxt[nn++] = (rfrag){base, mp - base, -1};
                nxt[nn++] = (rfrag){mp, sl, id};
                blen -= mp + sl - base;
                base = mp + sl;
                if (naive_rstrip(t, phi3, id))
                    while (blen > 0 && isspace((unsigned char)text[base])) {
                        base++;
                        blen--;
                    }
            }
            if (blen > 0) nxt[nn++] = (rfrag){base, blen, -1};
        }
        memcpy(cur, nxt, sizeof(rfrag) * (size_t)nn);
        nc = nn;
    }
    for (int f = 0; f < nc; f++) {
        if (cur[f].tok >= 0) {
            ids[n++] = cur[f].tok;
        } else {
            int k = tok_encode(t, text + cur[f].off, cur[f].len, false, false, ids + n, cap - n);
            n += k;
        }
    }
    return n;
}

static void check_special_split(const char *name, const tokenizer *t) {
    int32_t *sp = malloc(sizeof(int32_t) * (size_t)tok_n_vocab(t));
    int n_sp = 0;
    for (int32_t i = 0; i < tok_n_vocab(t); i++) {
        int ty = tok_type(t, i);
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) && tok_piece_str(t, i)[0])
            sp[n_sp++] = i;
    }
    qsort_r(sp, (size_t)n_sp, sizeof(int32_t), cmp_len_desc, (void *)t);
    uint64_t rng = 0x1234567;
    int ok = 0, total = 0;
    for (int it = 0; it < 300; it++) {
        char text[2048];
        size_t len = 0;
        int parts = 1 + (int)(rng % 12);
        for (int k = 0; k < parts && len < 1800; k++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            uint32_t r = (uint32_t)(rng >> 33);
            const char *s = tok_piece_str(t, sp[r % (uint32_t)n_sp]);
            size_t sl = strlen(s);
            switch ((r >> 8) % 5) {
            case 0: /* a whole special token */
            case 1:
                if (sl < 100) {
                    memcpy(text + len, s, sl);
                    len += sl;
                }
                break;
            case 2: /* a prefix of one */
                if (sl > 1 && sl < 100) {
                    memcpy(text + len, s, sl - 1 - (r >> 12) % (sl - 1));
                    len += sl - 1 - (r >> 12) % (sl - 1);
                }
                break;
            case 3:
                text[len++] = " <|>ab\n"[(r >> 12) % 7];
                break;
            default:
                memcpy(text + len, " hello", 6);
                len += 6;
            }
        }
        for (int special = 0; special < 2; special++) {
            int32_t a[4096], b[4096];
            int na = tok_encode(t, text, len, false, special, a, 4096);
            int nb = naive_encode(t, sp, n_sp, text, len, special, strcmp(name, "phi-3") == 0, b, 4096);
            bool same = na == nb && memcmp(a, b, sizeof(int32_t) * (size_t)na) == 0;
            if (!same) fprintf(stderr, "special split %s: '%.*s' (parse_special %d)\n", name, (int)len, text, special);
            CHECK(same);
            ok += same;
            total++;
        }
    }
    printf("  %-16s %d/%d special-split texts (%d special tokens)\n", name, ok, total, n_sp);
    free(sp);
}

int main(void) {
    log_level = LOG_ERROR;
    check_metadata();
    check_stories();
    static const char *vocabs[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "deepseek-coder",
                                   "falcon", "mpt", "starcoder", "refact", "bert-bge"};
    for (size_t i = 0; i < ARRAY_LEN(vocabs); i++) {
        double t0 = clock_ms();
        tokenizer *t = load_vocab(vocabs[i]);
        if (!t) continue;
        double t1 = clock_ms();
        run_vectors(vocabs[i], t);
        printf("  (load %.0f ms, vectors %.0f ms)\n", t1 - t0, clock_ms() - t1);
        if (i == 0) check_units_spm(t);
        if (i <= 4) check_special_split(vocabs[i], t);
        if (strcmp(vocabs[i], "bert-bge") == 0) {
            /* WordPiece: [CLS] ... [SEP] with add_bos, pieces joined by spaces */
            int32_t ids[16];
            char out[64];
            int n = encode(t, "Hello world", true, false, ids, 16);
            CHECK_EQ_INT(n, 4);
            CHECK(ids[0] == 101 && ids[1] == 7592 && ids[2] == 2088 && ids[3] == 102);
            CHECK_EQ_INT(tok_decode(t, ids, n, true, out, sizeof out), 11);
            CHECK_STR(out, "hello world");
            CHECK_STR(tok_model_name(t), "bert");
        }
        tok_free(t);
    }
    tokenizer *l3 = test_load_hf_tokenizer("llama3", "tokenizer_config.json");
    if (l3) run_vectors("llama-bpe", l3);
    tokenizer *q3 = test_load_hf_tokenizer("qwen3", "tokenizer_config.json");
    if (q3) run_vectors("qwen2", q3);
    check_units_bpe(l3, q3);
    if (l3) check_special_split("llama3", l3);
    if (q3) check_special_split("qwen3", q3);
    tok_free(l3);
    tok_free(q3);
    tokenizer *sm = test_load_hf_tokenizer("smollm2-135m-instruct", "config.json");
    if (sm) {
        int32_t ids[64];
        CHECK_STR(tok_pre_name(sm), "smollm");
        CHECK_EQ_INT(tok_bos(sm), 1);
        CHECK_EQ_INT(tok_eos(sm), 2);
        /* smollm splits digits one by one */
        int n = encode(sm, "12345", false, false, ids, 64);
        CHECK_EQ_INT(n, 5);
        tok_free(sm);
    }
    tokenizer *l2 = test_load_hf_tokenizer("llama2", "tokenizer_config.json");
    if (l2) {
        int32_t ids[64];
        char out[256];
        CHECK_STR(tok_model_name(l2), "llama");
        CHECK(tok_add_bos(l2));
        int n = encode(l2, "Hello world", true, false, ids, 64);
        CHECK(n >= 3 && ids[0] == 1);
        CHECK_EQ_INT(tok_decode(l2, ids, n, true, out, sizeof out), 11);
        CHECK_STR(out, "Hello world");
        tok_free(l2);
    }
    return test_summary("test_tok");
}
