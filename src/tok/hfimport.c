/*
 * hfimport.c — Hugging Face tokenizer.json -> tokenizer.ggml.* metadata.
 *
 * Place in the flow: beside tok.c; produces what tok_load consumes.
 *
 * Steps: parse both JSON texts (jansson); read model.vocab and added_tokens
 * into one id-indexed table (gaps become "[PADn]" unused tokens); classify
 * token types the way the reference GGUF converter does (special added
 * tokens and tokens that look special, "<|...|>", are control; other added
 * tokens user-defined; <0xNN> byte tokens; the unk token unknown); detect the
 * flavour (byte-level vs SentencePiece-style) and the pre-tokenizer; then
 * write everything at once so a failure leaves `w` untouched.
 */
#include "hfimport.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok.h"

#define MAX_VOCAB (1 << 24)

/* The pre-tokenizer regexes of known families, as written in tokenizer.json. */
static const struct {
    const char *regex;
    const char *pre;
} k_regex_pre[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "gpt-2"},
    /* o200k (gpt-oss): with (?i:...) as Hugging Face writes it, and with the
     * case variants spelt out as tiktoken's pattern (tools/o200k_harmony.mjs) */
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
     "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "gpt-4o"},
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
     "('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?|"
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
     "('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?|"
     "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "gpt-4o"},
};

typedef struct imp {
    int n;            /* vocabulary size            */
    const char **tok; /* n strings (into the JSON or pads[]) */
    size_t *len;
    int32_t *type;
    char **pads; /* owned "[PADn]" strings */
} imp;

static void imp_free(imp *m) {
    if (m->pads)
        for (int i = 0; i < m->n; i++) free(m->pads[i]);
    free(m->pads);
    free(m->tok);
    free(m->len);
    free(m->type);
}

/* Integers are parsed as reals (JSON_DECODE_INT_AS_REAL: configs carry
 * numbers such as 1e30 written as integers); an id must be integral and in
 * [0, MAX_VOCAB). */
static bool json_id(json_t *v, int *out) {
    if (!json_is_number(v)) return false;
    double d = json_number_value(v);
    if (!(d >= 0 && d < MAX_VOCAB) || d != (double)(int)d) return false;
    *out = (int)d;
    return true;
}

static bool looks_special(const char *s, size_t n) {
    if ((n == 5 && memcmp(s, "<pad>", 5) == 0) || (n == 6 && memcmp(s, "<mask>", 6) == 0)) return true;
    if (n >= 4 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>') return true;
    /* "<｜...｜>" (fullwidth bars, deepseek) */
    if (n >= 8 && memcmp(s, "<\xef\xbd\x9c", 4) == 0 && memcmp(s + n - 4, "\xef\xbd\x9c>", 4) == 0) return true;
    if (n >= 8 && memcmp(s, "<unused", 7) == 0 && s[n - 1] == '>') return true;
    return false;
}

static bool is_byte_token(const char *s, size_t n) {
    const char *hex = "0123456789ABCDEFabcdef";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* A config token field: "tok", {"content": "tok"} or null. */
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = cfg ? json_object_get(cfg, key) : NULL;
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

static int32_t find_tok(const imp *m, const char *s) {
    size_t n = strlen(s);
    for (int i = m->n - 1; i >= 0; i--) /* added tokens are usually at the end */
        if (m->len[i] == n && memcmp(m->tok[i], s, n) == 0) return i;
    return -1;
}

/* The id of a config's special token: "<key>_token_id" number, else the
 * "<key>_token" string looked up; -1 if neither. */
static int32_t config_id(const imp *m, json_t *cfg, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "%s_token_id", key);
    int id;
    if (cfg && json_id(json_object_get(cfg, k), &id) && id < m->n) return id;
    snprintf(k, sizeof k, "%s_token", key);
    const char *s = config_token(cfg, k);
    return s ? find_tok(m, s) : -1;
}

/* Finds the Split regex and the shape of the pre-tokenizer. */
static void scan_pre(json_t *pt, const char **regex, bool *byte_level, bool *digits, bool *metaspace) {
    if (!json_is_object(pt)) return;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type) return;
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(pt, "pretokenizers");
        size_t i;
        json_t *x;
        if (json_is_array(arr)) json_array_foreach(arr, i, x) scan_pre(x, regex, byte_level, digits, metaspace);
    } else if (strcmp(type, "Split") == 0) {
        json_t *pat = json_object_get(pt, "pattern");
        json_t *r = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
        if (json_is_string(r)) *regex = json_string_value(r);
    } else if (strcmp(type, "ByteLevel") == 0) {
        *byte_level = true;
        if (json_is_true(json_object_get(pt, "use_regex")) && !*regex) *regex = k_regex_pre[2].regex;
    } else if (strcmp(type, "Digits") == 0) {
        *digits = json_is_true(json_object_get(pt, "individual_digits"));
    } else if (strcmp(type, "Metaspace") == 0) {
        *metaspace = true;
    }
}

static int import(json_t *root, json_t *cfg, gguf_writer *w, err_t *e) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return err_set(e, ERR_FORMAT, "tokenizer.json: 'model' missing or not an object");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0)
        return err_set(e, ERR_UNSUPPORTED, "tokenizer.json: model.type '%s' not supported (BPE only)",
                       mtype ? mtype : "(none)");
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return err_set(e, ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added))
        return err_set(e, ERR_FORMAT, "tokenizer.json: added_tokens is not an array");

    /* vocabulary size */
    long long max_id = -1;
    const char *key;
    json_t *val;
    int id;
    json_object_foreach(vocab, key, val) {
        if (!json_id(val, &id))
            return err_set(e, ERR_FORMAT, "tokenizer.json: model.vocab['%.40s'] is not an id in [0, 2^24)", key);
        if (id > max_id) max_id = id;
    }
    size_t ai;
    json_t *at;
    if (json_is_array(added)) json_array_foreach(added, ai, at) {
            if (!json_id(json_object_get(at, "id"), &id) || !json_is_string(json_object_get(at, "content")))
                return err_set(e, ERR_FORMAT, "tokenizer.json: added_tokens[%zu]: bad id or content", ai);
            if (id > max_id) max_id = id;
        }
    if (max_id < 0) return err_set(e, ERR_FORMAT, "tokenizer.json: empty vocabulary");

    imp m = {0};
    m.n = (int)max_id + 1;
    m.tok = xcalloc((size_t)m.n, sizeof(char *));
    m.len = xcalloc((size_t)m.n, sizeof(size_t));
    m.type = xcalloc((size_t)m.n, sizeof(int32_t));
    m.pads = xcalloc((size_t)m.n, sizeof(char *));
    json_object_foreach(vocab, key, val) {
        json_id(val, &id);
        m.tok[id] = key;
        m.len[id] = strlen(key);
        m.type[id] = TOK_TYPE_NORMAL;
    }
    bool byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    for (int i = 0; i < m.n; i++) {
        if (!m.tok[i]) continue;
        if (byte_fallback && is_byte_token(m.tok[i], m.len[i])) m.type[i] = TOK_TYPE_BYTE;
    }
    if (json_is_array(added)) json_array_foreach(added, ai, at) {
            json_id(json_object_get(at, "id"), &id);
            json_t *content = json_object_get(at, "content");
            m.tok[id] = json_string_value(content);
            m.len[id] = json_string_length(content);
            bool special = json_is_true(json_object_get(at, "special"));
            m.type[id] = (special || looks_special(m.tok[id], m.len[id])) ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
        }
    for (int i = 0; i < m.n; i++) {
        if (m.tok[i]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%d]", i);
        m.pads[i] = xstrdup(buf);
        m.tok[i] = m.pads[i];
        m.len[i] = strlen(buf);
        m.type[i] = TOK_TYPE_UNUSED;
    }
    int32_t unk_id = unk ? find_tok(&m, unk) : -1;
    if (unk_id >= 0) m.type[unk_id] = TOK_TYPE_UNKNOWN;

    /* flavour and pre-tokenizer */
    const char *regex = NULL;
    bool byte_level = false, digits = false, metaspace = false;
    scan_pre(json_object_get(root, "pre_tokenizer"), &regex, &byte_level, &digits, &metaspace);
    json_t *dec = json_object_get(root, "decoder");
    const char *dec_type = json_is_object(dec) ? json_string_value(json_object_get(dec, "type")) : NULL;
    if (dec_type && strcmp(dec_type, "ByteLevel") == 0) byte_level = true;
    bool spm = !byte_level && (byte_fallback || metaspace);
    const char *pre = NULL;
    if (!spm) {
        if (!byte_level) {
            imp_free(&m);
            return err_set(e, ERR_UNSUPPORTED, "tokenizer.json: neither byte-level nor byte-fallback BPE");
        }
        if (digits && regex && strcmp(regex, k_regex_pre[2].regex) == 0) {
            pre = "smollm"; /* Digits(individual) then the GPT-2 split: same as starcoder */
        } else if (regex) {
            for (size_t k = 0; k < ARRAY_LEN(k_regex_pre); k++)
                if (strcmp(regex, k_regex_pre[k].regex) == 0) pre = k_regex_pre[k].pre;
        }
        if (!pre) {
            imp_free(&m);
            return err_set(e, ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer regex not recognised: '%.200s'",
                           regex ? regex : "(none)");
        }
    }

    /* merges: "a b" strings or ["a", "b"] pairs */
    json_t *merges = json_object_get(model, "merges");
    size_t n_merges = json_is_array(merges) ? json_array_size(merges) : 0;
    char **mstr = xcalloc(n_merges ? n_merges : 1, sizeof(char *));
    int rc = 0;
    for (size_t i = 0; i < n_merges; i++) {
        json_t *x = json_array_get(merges, i);
        if (json_is_string(x)) {
            mstr[i] = xstrdup(json_string_value(x));
        } else if (json_is_array(x) && json_array_size(x) == 2 && json_is_string(json_array_get(x, 0)) &&
                   json_is_string(json_array_get(x, 1))) {
            const char *a = json_string_value(json_array_get(x, 0)), *b = json_string_value(json_array_get(x, 1));
            size_t la = strlen(a), lb = strlen(b);
            mstr[i] = xmalloc(la + lb + 2);
            memcpy(mstr[i], a, la);
            mstr[i][la] = ' ';
            memcpy(mstr[i] + la + 1, b, lb + 1);
        } else {
            rc = err_set(e, ERR_FORMAT, "tokenizer.json: model.merges[%zu] is neither 'a b' nor [a, b]", i);
            break;
        }
        if (!strchr(mstr[i] + (mstr[i][0] ? 1 : 0), ' ')) {
            rc = err_set(e, ERR_FORMAT, "tokenizer.json: model.merges[%zu] has no space", i);
            break;
        }
    }

    float *scores = NULL;
    if (rc == 0 && spm) {
        /* SentencePiece-style: score = -(rank of the first merge producing the
         * token) so the score-ordered SPM loop applies merges in rank order;
         * tokens no merge produces get the lowest score. */
        scores = xmalloc((size_t)m.n * sizeof(float));
        for (int i = 0; i < m.n; i++) scores[i] = (m.type[i] == TOK_TYPE_NORMAL) ? -1e9f : 0.0f;
        for (size_t i = 0; i < n_merges; i++) {
            char *sp = strchr(mstr[i] + 1, ' ');
            size_t la = (size_t)(sp - mstr[i]);
            char *res = xmalloc(strlen(mstr[i]));
            memcpy(res, mstr[i], la);
            strcpy(res + la, sp + 1);
            int k;
            if (json_id(json_object_get(vocab, res), &k) && k < m.n && scores[k] <= -1e9f) scores[k] = -(float)i;
            free(res);
        }
    }

    if (rc == 0) {
        gguf_writer_set_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
        gguf_writer_set_str(w, "tokenizer.ggml.pre", spm ? "default" : pre);
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", m.tok, m.len, (uint64_t)m.n);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, m.type, (uint64_t)m.n);
        if (spm) {
            gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)m.n);
            /* the normalizer prepends ▁ (Prepend) or Metaspace adds it */
            json_t *norm = json_object_get(root, "normalizer");
            char *ns = norm ? json_dumps(norm, JSON_COMPACT) : NULL;
            bool prefix = metaspace || (ns && strstr(ns, "\"Prepend\""));
            free(ns);
            gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", prefix);
            if (unk_id >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk_id);
        } else {
            gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mstr, NULL, n_merges);
        }
        int32_t bos = config_id(&m, cfg, "bos"), eos = config_id(&m, cfg, "eos"), pad = config_id(&m, cfg, "pad");
        if (bos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        if (eos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        if (pad >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
        json_t *ab = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
        if (json_is_boolean(ab)) {
            gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", json_is_true(ab));
        } else if (bos >= 0) {
            /* a TemplateProcessing post-processor that starts with BOS adds it */
            json_t *post = json_object_get(root, "post_processor");
            const char *pt = json_is_object(post) ? json_string_value(json_object_get(post, "type")) : NULL;
            if (pt && strcmp(pt, "TemplateProcessing") == 0) {
                json_t *first = json_array_get(json_object_get(post, "single"), 0);
                json_t *st = json_object_get(first, "SpecialToken");
                const char *sid = json_string_value(json_object_get(st, "id"));
                gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", sid && find_tok(&m, sid) == bos);
            }
        }
        json_t *ae = cfg ? json_object_get(cfg, "add_eos_token") : NULL;
        if (json_is_boolean(ae)) gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", json_is_true(ae));
        json_t *tmpl = cfg ? json_object_get(cfg, "chat_template") : NULL;
        if (json_is_array(tmpl)) { /* [{"name": "default", "template": "..."}, ...] */
            size_t i;
            json_t *x, *pick = NULL;
            json_array_foreach(tmpl, i, x) {
                const char *nm = json_string_value(json_object_get(x, "name"));
                if (!pick || (nm && strcmp(nm, "default") == 0)) pick = json_object_get(x, "template");
            }
            tmpl = pick;
        }
        if (json_is_string(tmpl))
            gguf_writer_set_str_n(w, "tokenizer.chat_template", json_string_value(tmpl), json_string_length(tmpl));
    }
    for (size_t i = 0; i < n_merges; i++) free(mstr[i]);
    free(mstr);
    free(scores);
    imp_free(&m);
    return rc;
}

static json_t *parse(const char *text, size_t len, const char *what, err_t *e) {
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!j) err_set(e, ERR_FORMAT, "%s: JSON error at line %d column %d: %s", what, je.line, je.column, je.text);
    else if (!json_is_object(j)) {
        json_decref(j);
        j = NULL;
        err_set(e, ERR_FORMAT, "%s: top level is not an object", what);
    }
    return j;
}

int tok_import_hf_mem(const char *tok_json, size_t tok_len, const char *cfg_json, size_t cfg_len, gguf_writer *w,
                      err_t *e) {
    json_t *root = parse(tok_json, tok_len, "tokenizer.json", e);
    if (!root) return ERR_FORMAT;
    json_t *cfg = NULL;
    if (cfg_json) {
        cfg = parse(cfg_json, cfg_len, "config", e);
        if (!cfg) {
            json_decref(root);
            return ERR_FORMAT;
        }
    }
    int rc = import(root, cfg, w, e);
    json_decref(cfg);
    json_decref(root);
    return rc;
}

int tok_import_hf(const char *tokenizer_json, const char *config_json_or_NULL, gguf_writer *w, err_t *e) {
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = file_read_all(tokenizer_json, &a, &na, e);
    if (rc < 0) return rc;
    if (config_json_or_NULL) {
        rc = file_read_all(config_json_or_NULL, &b, &nb, e);
        if (rc < 0) {
            free(a);
            return rc;
        }
    }
    rc = tok_import_hf_mem(a, na, b, nb, w, e);
    free(a);
    free(b);
    return rc;
}
