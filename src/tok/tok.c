/*
 * tok.c — tokenizer loading from GGUF metadata, the special-token split, the
 * encode entry point, pieces and the streaming detokenizer.
 *
 * Place in the flow: tok/. spm.c and bpe.c hold the merge loops, pretok.c the
 * byte-level pre-splitters; this file owns the tokenizer object.
 *
 * Invariants after tok_load: every vocabulary string is in the pool and the
 * hash (a duplicated string maps to its last id, as in the reference); each
 * token has a decoded piece (ppool) whose length is <= max_piece; special[]
 * lists control, user-defined and unknown tokens, longest text first (ties
 * by id), which is the order the special-token split tries them in.
 */
#include "tok_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

#define TOK_MAX_TEXT (256u << 20)
#define TOK_MAX_STR (1u << 20)

void tok__vec_push(tok_vec *v, int32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->v = xrealloc(v->v, (size_t)v->cap * sizeof(int32_t));
    }
    v->v[v->n++] = id;
}

/* ---- per-call word cache -------------------------------------------------- */

#define WCACHE_MAX_WORD 128

static uint32_t wc_hash(const char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h ? h : 1;
}

bool tok__wcache_get(tok_wcache *c, const char *p, size_t n, tok_vec *out) {
    if (!c->s || n > WCACHE_MAX_WORD) return false;
    uint32_t h = wc_hash(p, n);
    for (uint32_t i = h & c->mask;; i = (i + 1) & c->mask) {
        tok_wslot *sl = &c->s[i];
        if (!sl->p) return false;
        if (sl->hash == h && sl->n == n && memcmp(sl->p, p, n) == 0) {
            for (int k = 0; k < sl->count; k++) tok__vec_push(out, out->v[sl->start + k]);
            return true;
        }
    }
}

void tok__wcache_put(tok_wcache *c, const char *p, size_t n, int start, int count) {
    if (n > WCACHE_MAX_WORD) return;
    if (!c->s || (uint32_t)(c->used + 1) * 2 > c->mask + 1) {
        uint32_t cap = c->s ? (c->mask + 1) * 2 : 256;
        tok_wslot *old = c->s;
        uint32_t old_cap = old ? c->mask + 1 : 0;
        c->s = xcalloc(cap, sizeof(tok_wslot));
        c->mask = cap - 1;
        for (uint32_t i = 0; i < old_cap; i++) {
            if (!old[i].p) continue;
            uint32_t j = old[i].hash & c->mask;
            while (c->s[j].p) j = (j + 1) & c->mask;
            c->s[j] = old[i];
        }
        free(old);
    }
    uint32_t h = wc_hash(p, n);
    uint32_t i = h & c->mask;
    while (c->s[i].p) {
        if (c->s[i].hash == h && c->s[i].n == n && memcmp(c->s[i].p, p, n) == 0) return;
        i = (i + 1) & c->mask;
    }
    c->s[i] = (tok_wslot){p, (uint32_t)n, h, start, count};
    c->used++;
}

void tok__wcache_free(tok_wcache *c) {
    free(c->s);
    c->s = NULL;
}

/* ---- string pool and hash ---------------------------------------------- */

static uint32_t str_hash(const char *s, size_t n) { return (uint32_t)hash_bytes(s, n, 0x746f6b); }
static int32_t special_rank(const tokenizer *t, const char *s, size_t n);

int32_t tok__find_n(const tokenizer *t, const char *s, size_t n) {
    if (!t->hslots) return -1;
    uint32_t h = str_hash(s, n) & t->hmask;
    for (;;) {
        int32_t id = t->hslots[h];
        if (id < 0) return -1;
        if (t->slen[id] == n && memcmp(t->spool + t->soff[id], s, n) == 0) return id;
        h = (h + 1) & t->hmask;
    }
}

/* Puts id in the hash under its string, replacing an earlier id with the same
 * string (the last duplicate wins, as in the reference loaders). */
static void hash_put(tokenizer *t, int32_t id) {
    const char *s = tok__str(t, id);
    size_t n = t->slen[id];
    uint32_t h = str_hash(s, n) & t->hmask;
    for (;;) {
        int32_t cur = t->hslots[h];
        if (cur < 0) {
            t->hslots[h] = id;
            t->n_hashed++;
            return;
        }
        if (t->slen[cur] == n && memcmp(tok__str(t, cur), s, n) == 0) {
            t->hslots[h] = id;
            return;
        }
        h = (h + 1) & t->hmask;
    }
}

static void hash_grow(tokenizer *t) {
    uint32_t cap = t->hmask ? (t->hmask + 1) * 2 : 1024;
    while ((uint64_t)cap < (uint64_t)t->n_str * 2 + 16) cap *= 2;
    free(t->hslots);
    t->hslots = xmalloc((size_t)cap * sizeof(int32_t));
    memset(t->hslots, 0xff, (size_t)cap * sizeof(int32_t));
    t->hmask = cap - 1;
    t->n_hashed = 0;
    /* Re-insert in id order so duplicates resolve the same way. */
    for (int32_t i = 0; i < t->n_str; i++)
        if (t->slen[i] > 0) hash_put(t, i);
}

/* Appends a string to the pool without hashing it; returns its id. */
static int32_t pool_add(tokenizer *t, const char *s, size_t n) {
    if (t->n_str == t->cap_str) {
        t->cap_str = t->cap_str ? t->cap_str * 2 : 1024;
        t->soff = xrealloc(t->soff, (size_t)t->cap_str * sizeof(uint32_t));
        t->slen = xrealloc(t->slen, (size_t)t->cap_str * sizeof(uint32_t));
    }
    if (t->spool_len + n + 1 > t->spool_cap) {
        size_t cap = t->spool_cap ? t->spool_cap : 1 << 16;
        while (cap < t->spool_len + n + 1) cap *= 2;
        t->spool = xrealloc(t->spool, cap);
        t->spool_cap = cap;
    }
    memcpy(t->spool + t->spool_len, s, n);
    t->spool[t->spool_len + n] = 0;
    t->soff[t->n_str] = (uint32_t)t->spool_len;
    t->slen[t->n_str] = (uint32_t)n;
    t->spool_len += n + 1;
    return t->n_str++;
}

int32_t tok__intern(tokenizer *t, const char *s, size_t n) {
    int32_t id = tok__find_n(t, s, n);
    if (id >= 0) return id;
    id = pool_add(t, s, n);
    if ((uint64_t)t->n_hashed * 2 + 2 > (uint64_t)t->hmask + 1)
        hash_grow(t);
    else
        hash_put(t, id);
    return id;
}

/* ---- loading ----------------------------------------------------------------- */

static int32_t meta_id(const gguf_ctx *g, const char *key, int32_t dflt, int n_vocab) {
    int64_t v;
    if (!gguf_get_i64(g, key, &v)) return dflt;
    if (v < 0 || v >= n_vocab) return -1; /* 0xFFFFFFFF and other "none" values */
    return (int32_t)v;
}

static void copy_gstr(char *dst, size_t cap, gguf_str s) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = 0;
}

/* Decoded bytes of token i (see tok_piece). */
static size_t make_piece(const tokenizer *t, int32_t i, char *buf) {
    const char *s = tok__str(t, i);
    size_t n = t->slen[i];
    int type = t->type[i];
    if (type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNKNOWN) {
        memcpy(buf, s, n);
        return n;
    }
    if (type == TOK_TYPE_BYTE) {
        unsigned v;
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && isxdigit((unsigned char)s[3]) &&
            isxdigit((unsigned char)s[4]) && sscanf(s + 3, "%2x", &v) == 1) {
            buf[0] = (char)v;
            return 1;
        }
        memcpy(buf, s, n); /* a byte token with an odd name: keep its text */
        return n;
    }
    if (type != TOK_TYPE_NORMAL) return 0; /* unused and unknown types: nothing */
    size_t o = 0;
    if (t->kind != TOK_KIND_BPE) { /* SentencePiece and WordPiece: ▁ is a space */
        for (size_t k = 0; k < n;) {
            if (k + 3 <= n && (uint8_t)s[k] == 0xE2 && (uint8_t)s[k + 1] == 0x96 && (uint8_t)s[k + 2] == 0x81) {
                buf[o++] = ' ';
                k += 3;
            } else {
                buf[o++] = s[k++];
            }
        }
        return o;
    }
    /* byte-level: each code point stands for one byte; others pass through */
    for (size_t k = 0; k < n;) {
        uint32_t cp;
        int l = unicode_decode(s + k, n - k, &cp);
        int b = unicode_cp_to_byte(cp);
        if (b >= 0 && !(cp == UNICODE_REPLACEMENT)) {
            buf[o++] = (char)b;
        } else {
            memcpy(buf + o, s + k, (size_t)l);
            o += (size_t)l;
        }
        k += (size_t)l;
    }
    return o;
}

static int cmp_special(const void *a, const void *b, void *arg) {
    const tokenizer *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->slen[x] != t->slen[y]) return t->slen[x] > t->slen[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static const char *const k_eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
};
static const char *const k_eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "<end_of_utterance>",
};

static void lowercase(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

static int load(tokenizer *t, const gguf_ctx *g, err_t *e) {
    gguf_str model;
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model))
        return err_set(e, ERR_NOTFOUND, "tokenizer.ggml.model: missing or not a string");
    copy_gstr(t->model_name, sizeof t->model_name, model);
    if (strcmp(t->model_name, "llama") == 0) {
        t->kind = TOK_KIND_SPM;
    } else if (strcmp(t->model_name, "gpt2") == 0) {
        t->kind = TOK_KIND_BPE;
    } else if (strcmp(t->model_name, "bert") == 0) {
        t->kind = TOK_KIND_WPM;
    } else {
        return err_set(e, ERR_UNSUPPORTED, "tokenizer.ggml.model: '%s' is not supported (llama, gpt2, bert)",
                       t->model_name);
    }
    gguf_str pre;
    if (gguf_get_str(g, "tokenizer.ggml.pre", &pre))
        copy_gstr(t->pre_name, sizeof t->pre_name, pre);
    else
        strcpy(t->pre_name, "default");

    int64_t ki = gguf_find_key(g, "tokenizer.ggml.tokens");
    gguf_vtype et;
    uint64_t n;
    if (ki < 0 || !gguf_kv_arr(g, ki, &et, &n) || et != GGUF_STRING)
        return err_set(e, ERR_NOTFOUND, "tokenizer.ggml.tokens: missing or not a string array");
    if (n == 0 || n > (1u << 24))
        return err_set(e, ERR_RANGE, "tokenizer.ggml.tokens: %llu tokens (allowed 1..16777216)",
                       (unsigned long long)n);
    t->n_vocab = (int)n;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_kv_arr_str(g, ki, i);
        if (s.len > TOK_MAX_STR)
            return err_set(e, ERR_RANGE, "tokenizer.ggml.tokens[%llu]: length %llu too long",
                           (unsigned long long)i, (unsigned long long)s.len);
        if (t->spool_len + s.len + 1 > 0xF0000000u)
            return err_set(e, ERR_RANGE, "tokenizer.ggml.tokens: total size too large at [%llu]",
                           (unsigned long long)i);
        pool_add(t, s.len ? s.ptr : "", (size_t)s.len);
    }
    hash_grow(t);

    t->scores = xcalloc((size_t)n, sizeof(float));
    t->type = xmalloc((size_t)n);
    t->flags = xcalloc((size_t)n, 1);
    memset(t->type, TOK_TYPE_NORMAL, (size_t)n);
    int64_t ks = gguf_find_key(g, "tokenizer.ggml.scores");
    if (ks >= 0) {
        uint64_t m;
        if (!gguf_kv_arr(g, ks, &et, &m) || et != GGUF_FLOAT32 || m != n)
            return err_set(e, ERR_FORMAT, "tokenizer.ggml.scores: expected %llu f32 values",
                           (unsigned long long)n);
        memcpy(t->scores, gguf_kv_arr_data(g, ks), (size_t)n * sizeof(float));
    }
    int64_t kt = gguf_find_key(g, "tokenizer.ggml.token_type");
    if (kt >= 0) {
        uint64_t m;
        if (!gguf_kv_arr(g, kt, &et, &m) || (et != GGUF_INT32 && et != GGUF_UINT32) || m != n)
            return err_set(e, ERR_FORMAT, "tokenizer.ggml.token_type: expected %llu i32 values",
                           (unsigned long long)n);
        const uint8_t *d = gguf_kv_arr_data(g, kt);
        for (uint64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, d + i * 4, 4);
            t->type[i] = (uint8_t)((v >= 1 && v <= 6) ? v : TOK_TYPE_UNUSED);
        }
    }

    /* defaults per model, then metadata */
    if (t->kind == TOK_KIND_SPM) {
        t->bos = n > 1 ? 1 : -1;
        t->eos = n > 2 ? 2 : -1;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
        t->pre = PRE_DEFAULT;
    } else if (t->kind == TOK_KIND_WPM) {
        /* [CLS] text [SEP]; ids from the cls/separator keys */
        t->bos = meta_id(g, "tokenizer.ggml.cls_token_id", n > 101 ? 101 : -1, t->n_vocab);
        t->eos = meta_id(g, "tokenizer.ggml.seperator_token_id", n > 102 ? 102 : -1, t->n_vocab);
        t->unk = n > 100 ? 100 : -1;
        t->add_bos = true;
        t->add_eos = true;
        t->add_space_prefix = true;
        t->pre = PRE_DEFAULT;
    } else {
        t->bos = t->eos = t->unk = -1;
        t->add_bos = false;
        t->add_space_prefix = false;
        if (!tok__pretok_from_name(t->pre_name, &t->pre)) {
            log_warn("tokenizer.ggml.pre: unknown pre-tokenizer '%s', using 'default'", t->pre_name);
            t->pre = PRE_DEFAULT;
        }
        if (strcmp(t->pre_name, "llama3") == 0 || strcmp(t->pre_name, "llama-v3") == 0 ||
            strcmp(t->pre_name, "llama-bpe") == 0 || strcmp(t->pre_name, "falcon3") == 0 ||
            strcmp(t->pre_name, "pixtral") == 0) {
            t->ignore_merges = true;
            t->add_bos = true;
        }
    }
    t->bos = meta_id(g, "tokenizer.ggml.bos_token_id", t->bos, t->n_vocab);
    t->eos = meta_id(g, "tokenizer.ggml.eos_token_id", t->eos, t->n_vocab);
    t->unk = meta_id(g, "tokenizer.ggml.unknown_token_id", t->unk, t->n_vocab);
    t->eot = meta_id(g, "tokenizer.ggml.eot_token_id", -1, t->n_vocab);
    t->eom = meta_id(g, "tokenizer.ggml.eom_token_id", -1, t->n_vocab);
    bool b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) t->add_space_prefix = b;
    if (t->kind == TOK_KIND_BPE && gguf_get_bool(g, "tokenizer.ggml.ignore_merges", &b)) t->ignore_merges = b;
    gguf_str tmpl;
    if (gguf_get_str(g, "tokenizer.chat_template", &tmpl)) t->chat_template = xstrndup(tmpl.ptr, (size_t)tmpl.len);

    /* fill-in-the-middle tokens: the metadata (newer and older keys), else
     * the spellings of the code models that have them (Qwen2.5-Coder,
     * StarCoder / SantaCoder / Refact, DeepSeek-Coder, CodeLlama) */
    static const char *const fim_keys[2][3] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id"},
        {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id", "tokenizer.ggml.middle_token_id"}};
    static const char *const fim_names[][3] = {{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
                                               {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
                                               {"<fim-prefix>", "<fim-suffix>", "<fim-middle>"},
                                               {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
                                                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
                                                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"},
                                               {"\xe2\x96\x81<PRE>", "\xe2\x96\x81<SUF>", "\xe2\x96\x81<MID>"},
                                               {"<PRE>", "<SUF>", "<MID>"}};
    for (int k = 0; k < 3; k++)
        t->fim[k] = meta_id(g, fim_keys[0][k], meta_id(g, fim_keys[1][k], -1, t->n_vocab), t->n_vocab);
    for (size_t s = 0; s < ARRAY_LEN(fim_names) && (t->fim[0] < 0 || t->fim[1] < 0 || t->fim[2] < 0); s++)
        for (int k = 0; k < 3; k++) t->fim[k] = tok_find(t, fim_names[s][k]);

    /* end-of-generation tokens (marked control, as the reference does) */
    if (t->eot < 0) {
        for (size_t k = 0; k < ARRAY_LEN(k_eot_names) && t->eot < 0; k++) {
            int32_t id = tok_find(t, k_eot_names[k]);
            if (id >= 0) t->eot = id;
        }
    }
    for (size_t k = 0; k < ARRAY_LEN(k_eog_names); k++) {
        int32_t id = tok_find(t, k_eog_names[k]);
        if (id >= 0) {
            t->flags[id] |= TOKF_EOG;
            t->type[id] = TOK_TYPE_CONTROL;
        }
    }
    if (t->eot >= 0) {
        t->flags[t->eot] |= TOKF_EOG;
        if (t->type[t->eot] != TOK_TYPE_CONTROL) t->type[t->eot] = TOK_TYPE_CONTROL;
    }
    /* o200k_harmony (gpt-oss): a reply is several messages, and <|end|>
     * closes one of them (the analysis before the final answer), so only
     * <|return|> and <|call|> end the generation. The header tokens
     * (<|start|>, <|channel|>, <|message|>, <|constrain|>) are the syntax of
     * the output that the harmony parser (chat/toolcall.c) reads and that a
     * tool-call grammar writes, so they are user-defined: streamed as text
     * and allowed in grammars, where control tokens are neither. llama.cpp
     * makes the same two changes, recognising the vocabulary the same way. */
    int32_t hm_return = tok_find(t, "<|return|>"), hm_call = tok_find(t, "<|call|>"), hm_end = tok_find(t, "<|end|>");
    if (hm_return >= 0 && hm_call >= 0 && tok_find(t, "<|channel|>") >= 0 && tok_find(t, "<|message|>") >= 0) {
        static const char *const hm_syntax[] = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"};
        for (size_t k = 0; k < ARRAY_LEN(hm_syntax); k++) {
            int32_t id = tok_find(t, hm_syntax[k]);
            if (id >= 0) t->type[id] = TOK_TYPE_USER_DEFINED;
        }
        if (hm_end >= 0) t->flags[hm_end] &= (uint8_t)~TOKF_EOG;
        if (t->eot == hm_end) t->eot = hm_return;
    }
    if (t->eos >= 0) t->flags[t->eos] |= TOKF_EOG;
    if (t->eom >= 0) t->flags[t->eom] |= TOKF_EOG;

    /* byte tokens / byte-level alphabet */
    if (t->kind == TOK_KIND_SPM) {
        t->spm_word_split = true;
        for (int32_t i = 0; i < t->n_vocab && t->spm_word_split; i++) {
            const char *s = tok__str(t, i);
            uint32_t n2 = t->slen[i];
            for (uint32_t k = 1; k + 3 <= n2; k++)
                if (memcmp(s + k, "\xe2\x96\x81", 3) == 0 && !(k >= 3 && memcmp(s + k - 3, "\xe2\x96\x81", 3) == 0)) {
                    t->spm_word_split = false;
                    break;
                }
        }
        for (int b2 = 0; b2 < 256; b2++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b2);
            int32_t id = tok_find(t, name);
            if (id < 0) {
                char c = (char)b2;
                id = tok__find_n(t, &c, 1);
            }
            t->byte_tok[b2] = id >= 0 ? id : t->unk;
        }
    } else if (t->kind == TOK_KIND_BPE) {
        int rc = tok__bpe_load_merges(t, g, e);
        if (rc < 0) return rc;
    }

    /* special tokens, longest first */
    t->special = xmalloc((size_t)n * sizeof(int32_t));
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) && t->slen[i] > 0)
            t->special[t->n_special++] = i;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);
    /* lookup tables of the special-token split: string -> rank (the first
     * rank wins for a duplicated string), first bytes, first byte pairs and
     * the distinct lengths, longest first */
    uint32_t sp_cap = 64;
    while (sp_cap < (uint32_t)t->n_special * 2 + 2) sp_cap *= 2;
    t->sp_slots = xmalloc(sp_cap * sizeof(int32_t));
    memset(t->sp_slots, 0xff, sp_cap * sizeof(int32_t));
    t->sp_mask = sp_cap - 1;
    t->sp_lens = xmalloc((size_t)(t->n_special + 1) * sizeof(int));
    for (int k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        const char *s = tok__str(t, id);
        uint32_t l = t->slen[id];
        if (special_rank(t, s, l) < 0) {
            uint32_t h = str_hash(s, l) & t->sp_mask;
            while (t->sp_slots[h] >= 0) h = (h + 1) & t->sp_mask;
            t->sp_slots[h] = k;
        }
        uint8_t b0 = (uint8_t)s[0];
        t->sp_first[b0 >> 6] |= 1ULL << (b0 & 63);
        if (l >= 2) {
            unsigned pr = (unsigned)b0 << 8 | (uint8_t)s[1];
            t->sp_pair[pr >> 6] |= 1ULL << (pr & 63);
        }
        if (t->n_sp_lens == 0 || t->sp_lens[t->n_sp_lens - 1] != (int)l) t->sp_lens[t->n_sp_lens++] = (int)l;
    }

    /* phi-3 strips the spaces after its special tokens (reference rule) */
    gguf_str gname;
    char name[64] = "";
    if (gguf_get_str(g, "general.name", &gname)) copy_gstr(name, sizeof name, gname);
    lowercase(name);
    if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (int k = 0; k < t->n_special; k++) t->flags[t->special[k]] |= TOKF_RSTRIP;
        int32_t id = tok_find(t, "</s>");
        if (id >= 0) t->flags[id] |= TOKF_RSTRIP;
        const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t k = 0; k < ARRAY_LEN(keep); k++) {
            id = tok_find(t, keep[k]);
            if (id >= 0) t->flags[id] &= (uint8_t)~TOKF_RSTRIP;
        }
    }

    /* decoded pieces */
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        total += t->slen[i];
        if ((int)t->slen[i] > t->max_str) t->max_str = (int)t->slen[i];
    }
    t->ppool = xmalloc(total + 1);
    t->poff = xmalloc((size_t)n * sizeof(uint32_t));
    t->plen = xmalloc((size_t)n * sizeof(uint32_t));
    size_t o = 0;
    t->max_piece = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t l = make_piece(t, i, t->ppool + o); /* never longer than the string */
        t->poff[i] = (uint32_t)o;
        t->plen[i] = (uint32_t)l;
        if ((int)l > t->max_piece) t->max_piece = (int)l;
        o += l;
    }
    return 0;
}

int tok_load(const gguf_ctx *g, tokenizer **out, err_t *e) {
    *out = NULL;
    if (!g) return err_set(e, ERR_INVALID, "tok_load: no gguf");
    tokenizer *t = xcalloc(1, sizeof *t);
    int rc = load(t, g, e);
    if (rc < 0) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

size_t tok_bytes(const tokenizer *t) {
    if (!t) return 0;
    size_t b = sizeof *t + t->spool_cap + (size_t)t->cap_str * 2 * sizeof(uint32_t) +
               (t->hslots ? ((size_t)t->hmask + 1) * sizeof *t->hslots : 0) +
               (size_t)t->n_vocab * (sizeof *t->scores + 2 + 2 * sizeof(uint32_t)) + 1 +
               (t->mslots ? ((size_t)t->mmask + 1) * sizeof *t->mslots : 0) +
               (size_t)t->n_special * sizeof *t->special + (t->sp_slots ? ((size_t)t->sp_mask + 1) * sizeof(int32_t) : 0) +
               ((size_t)t->n_special + 1) * sizeof(int) + (t->chat_template ? strlen(t->chat_template) + 1 : 0);
    for (int32_t i = 0; i < t->n_vocab; i++) b += t->slen[i]; /* the decoded pieces (ppool) */
    return b;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->spool);
    free(t->soff);
    free(t->slen);
    free(t->hslots);
    free(t->scores);
    free(t->type);
    free(t->flags);
    free(t->ppool);
    free(t->poff);
    free(t->plen);
    free(t->mslots);
    free(t->special);
    free(t->sp_slots);
    free(t->sp_lens);
    free(t->chat_template);
    free(t);
}

/* ---- accessors ------------------------------------------------------------------ */

int tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
bool tok_add_bos(const tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool tok_is_eog(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOKF_EOG);
}
const char *tok_chat_template(const tokenizer *t) { return t->chat_template; }
const char *tok_model_name(const tokenizer *t) { return t->model_name; }
const char *tok_pre_name(const tokenizer *t) { return t->pre_name; }

int tok_piece(const tokenizer *t, int32_t id, char *buf, int cap) {
    if (id < 0 || id >= t->n_vocab) return ERR_INVALID;
    int n = (int)t->plen[id];
    if (cap > 0) memcpy(buf, t->ppool + t->poff[id], (size_t)MIN(n, cap));
    return n;
}

const char *tok_piece_str(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return tok__str(t, id);
}

bool tok_fim(const tokenizer *t, int32_t ids[3]) {
    for (int k = 0; k < 3; k++) ids[k] = t->fim[k];
    return t->fim[0] >= 0 && t->fim[1] >= 0 && t->fim[2] >= 0;
}

int32_t tok_find(const tokenizer *t, const char *piece) {
    int32_t id = tok__find_n(t, piece, strlen(piece));
    return id < t->n_vocab ? id : -1;
}

bool tok_is_special(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return false;
    return t->type[id] == TOK_TYPE_CONTROL || t->type[id] == TOK_TYPE_USER_DEFINED;
}

int tok_type(const tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return 0;
    return t->type[id];
}

/* ---- encoding ------------------------------------------------------------------ */

/* A piece of the input: raw text [off, off+len) or one special token. */
typedef struct frag {
    size_t off, len;
    int32_t tok; /* -1 for raw text */
} frag;

typedef struct frag_vec {
    frag *v;
    int n, cap;
} frag_vec;

static void frag_push(frag_vec *f, size_t off, size_t len, int32_t tok) {
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 16;
        f->v = xrealloc(f->v, (size_t)f->cap * sizeof(frag));
    }
    f->v[f->n++] = (frag){off, len, tok};
}

/* An occurrence of a special token in the text. */
typedef struct occ {
    int32_t rank; /* index in t->special: the order tokens claim text in */
    uint32_t pos;
} occ;

static int cmp_occ_rank(const void *a, const void *b) {
    const occ *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int cmp_occ_pos(const void *a, const void *b) {
    const occ *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Rank of the special token spelled s[0..n), -1 if none. */
static int32_t special_rank(const tokenizer *t, const char *s, size_t n) {
    uint32_t h = str_hash(s, n) & t->sp_mask;
    for (;;) {
        int32_t r = t->sp_slots[h];
        if (r < 0) return -1;
        int32_t id = t->special[r];
        if (t->slen[id] == n && memcmp(tok__str(t, id), s, n) == 0) return r;
        h = (h + 1) & t->sp_mask;
    }
}

/* The special-token split, with the reference's semantics: tokens are tried
 * longest first (then by id); each claims, left to right, its occurrences
 * that lie wholly in text no earlier token claimed; LSTRIP/RSTRIP tokens also
 * remove the whitespace next to them. Without parse_special only
 * user-defined tokens take part.
 *
 * Rather than searching the text once per special token (vocabularies carry
 * thousands), every occurrence of every special token is found in one pass
 * (a lookup per distinct token length at the positions whose first two bytes
 * start some special token), then occurrences are replayed in claim order
 * over a per-byte state: 0 raw, 1 token, 2 removed. */
static void split_special(const tokenizer *t, const char *text, size_t len, bool parse_special, frag_vec *out) {
    out->v = NULL;
    out->n = out->cap = 0;
    occ *oc = NULL;
    size_t n_oc = 0, cap_oc = 0;
    if (t->n_special > 0 && len <= UINT32_MAX) {
        for (size_t p = 0; p < len; p++) {
            uint8_t b0 = (uint8_t)text[p];
            if (!(t->sp_first[b0 >> 6] >> (b0 & 63) & 1)) continue;
            unsigned pr = p + 1 < len ? ((unsigned)b0 << 8 | (uint8_t)text[p + 1]) : 0;
            bool pair_ok = p + 1 < len && (t->sp_pair[pr >> 6] >> (pr & 63) & 1);
            for (int k = 0; k < t->n_sp_lens; k++) {
                size_t l = (size_t)t->sp_lens[k];
                if (l > len - p || (l >= 2 && !pair_ok)) continue;
                int32_t r = special_rank(t, text + p, l);
                if (r < 0) continue;
                if (!parse_special && t->type[t->special[r]] != TOK_TYPE_USER_DEFINED) continue;
                if (n_oc == cap_oc) {
                    cap_oc = cap_oc ? cap_oc * 2 : 16;
                    oc = xrealloc(oc, cap_oc * sizeof(occ));
                }
                oc[n_oc++] = (occ){r, (uint32_t)p};
            }
        }
    }
    if (n_oc == 0) {
        frag_push(out, 0, len, -1);
        return;
    }
    qsort(oc, n_oc, sizeof(occ), cmp_occ_rank);
    uint8_t *st = xcalloc(len, 1);
    size_t n_acc = 0;
    for (size_t i = 0; i < n_oc; i++) {
        int32_t id = t->special[oc[i].rank];
        size_t p = oc[i].pos, l = t->slen[id], q;
        for (q = p; q < p + l && st[q] == 0; q++) {}
        if (q < p + l) continue; /* overlaps text already claimed */
        memset(st + p, 1, l);
        if (t->flags[id] & TOKF_LSTRIP)
            for (q = p; q > 0 && st[q - 1] == 0 && isspace((unsigned char)text[q - 1]); q--) st[q - 1] = 2;
        if (t->flags[id] & TOKF_RSTRIP)
            for (q = p + l; q < len && st[q] == 0 && isspace((unsigned char)text[q]); q++) st[q] = 2;
        oc[n_acc++] = oc[i]; /* accepted occurrences, reusing the array */
    }
    qsort(oc, n_acc, sizeof(occ), cmp_occ_pos);
    size_t a = 0;
    for (size_t p = 0; p < len;) {
        if (st[p] == 1) {
            int32_t id = t->special[oc[a++].rank];
            frag_push(out, p, t->slen[id], id);
            p += t->slen[id];
        } else if (st[p] == 2) {
            p++;
        } else {
            size_t q = p;
            while (q < len && st[q] == 0) q++;
            frag_push(out, p, q - p, -1);
            p = q;
        }
    }
    free(st);
    free(oc);
}

/* SentencePiece fragment: optional dummy prefix, spaces to ▁. */
static void spm_fragment(const tokenizer *t, const char *s, size_t n, bool prefix, tok_vec *out) {
    size_t spaces = prefix ? 1 : 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    char *buf = xmalloc(n + spaces * 2 + 1);
    size_t o = 0;
    if (prefix) {
        memcpy(buf, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(buf + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            buf[o++] = s[i];
        }
    }
    tok__spm_encode(t, buf, o, out);
    free(buf);
}

/* continuation: the text continues earlier text (no SentencePiece dummy
 * prefix before its first fragment). */
static int encode(const tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                  bool continuation, int32_t *out, int cap) {
    if (!t || (!text && len > 0)) return ERR_INVALID;
    if (len > TOK_MAX_TEXT) return ERR_RANGE;
    tok_vec v = {0};
    if (add_bos && t->bos >= 0) tok__vec_push(&v, t->bos);
    if (len > 0) {
        frag_vec fr;
        split_special(t, text, len, parse_special, &fr);
        bool prev_special = !continuation;
        for (int i = 0; i < fr.n; i++) {
            if (fr.v[i].tok >= 0) {
                tok__vec_push(&v, fr.v[i].tok);
                prev_special = true;
                continue;
            }
            if (t->kind == TOK_KIND_SPM) {
                spm_fragment(t, text + fr.v[i].off, fr.v[i].len, t->add_space_prefix && prev_special, &v);
            } else if (t->kind == TOK_KIND_WPM) {
                tok__wpm_encode(t, text + fr.v[i].off, fr.v[i].len, &v);
            } else {
                tok__bpe_encode(t, text + fr.v[i].off, fr.v[i].len, &v);
            }
            prev_special = false;
        }
        free(fr.v);
    }
    if (add_bos && t->add_eos && t->eos >= 0) tok__vec_push(&v, t->eos);
    int n = v.n;
    if (out && cap > 0 && n > 0) memcpy(out, v.v, (size_t)MIN(n, cap) * sizeof(int32_t));
    free(v.v);
    return n;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special, int32_t *out,
               int cap) {
    return encode(t, text, len, add_bos, parse_special, false, out, cap);
}

int tok_encode_continuation(const tokenizer *t, const char *text, size_t len, int32_t *out, int cap) {
    return encode(t, text, len, false, true, true, out, cap);
}

double tok_bench_mb_per_s(const tokenizer *t, const char *text, size_t len, int reps) {
    if (reps < 1) reps = 1;
    double t0 = clock_ms();
    for (int r = 0; r < reps; r++) tok_encode(t, text, len, false, false, NULL, 0);
    double ms = clock_ms() - t0;
    if (ms <= 0) ms = 1e-3;
    return (double)len * reps / 1e6 / (ms / 1e3);
}

/* ---- streaming detokenizer ------------------------------------------------------ */

void tok_stream_init(tok_stream *s, const tokenizer *t, bool skip_special) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->skip_special = skip_special;
}

int tok_stream_max_out(const tokenizer *t) { return 3 * (t->max_piece + 4) + 8; }

/* Output cursor with a hard capacity. */
typedef struct outbuf {
    char *p;
    int n, cap;
    bool overflow;
} outbuf;

static void out_put(outbuf *o, const char *s, int n) {
    if (o->n + n > o->cap) {
        o->overflow = true;
        return;
    }
    memcpy(o->p + o->n, s, (size_t)n);
    o->n += n;
}

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Feeds one byte through the UTF-8 assembler of stream s. */
static void feed_byte(tok_stream *s, char c, outbuf *o) {
    if (s->n_pend == 0 && (uint8_t)c < 0x80) {
        out_put(o, &c, 1);
        return;
    }
    s->pend[s->n_pend++] = c;
    while (s->n_pend > 0) {
        int r = utf8_check(s->pend, s->n_pend);
        if (r == 0) return; /* valid so far, wait for more */
        int drop;
        if (r > 0) {
            out_put(o, s->pend, r);
            drop = r;
        } else {
            /* replace the maximal valid-but-incomplete prefix (at least one byte) */
            drop = 1;
            for (int k = s->n_pend - 1; k >= 2; k--)
                if (utf8_check(s->pend, (size_t)k) == 0) {
                    drop = k;
                    break;
                }
            out_put(o, k_fffd, 3);
        }
        memmove(s->pend, s->pend + drop, (size_t)(s->n_pend - drop));
        s->n_pend = (uint8_t)(s->n_pend - drop);
    }
}

int tok_stream_push(tok_stream *s, int32_t id, char *out, int cap) {
    const tokenizer *t = s->t;
    if (id < 0 || id >= t->n_vocab) return ERR_INVALID;
    tok_stream st = *s;
    outbuf o = {out, 0, cap, false};
    int ty = t->type[id];
    if (st.skip_special && ty == TOK_TYPE_CONTROL) {
        if (id == t->bos && t->kind != TOK_KIND_BPE && t->add_space_prefix) st.strip_space = true;
        *s = st;
        return 0;
    }
    const char *p = t->ppool + t->poff[id];
    int n = (int)t->plen[id];
    if (n > 0 && st.strip_space) {
        if (p[0] == ' ') {
            p++;
            n--;
        }
        st.strip_space = false;
    }
    for (int i = 0; i < n; i++) feed_byte(&st, p[i], &o);
    if (o.overflow) return ERR_RANGE;
    *s = st;
    return o.n;
}

int tok_stream_flush(tok_stream *s, char *out, int cap) {
    if (s->n_pend == 0) return 0;
    if (cap < 3) return ERR_RANGE;
    memcpy(out, k_fffd, 3);
    s->n_pend = 0;
    return 3;
}

int tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special, char *out, int cap) {
    tok_stream s;
    tok_stream_init(&s, t, skip_special);
    int tcap = tok_stream_max_out(t);
    char *tmp = xmalloc((size_t)tcap);
    long total = 0;
    for (int i = 0; i <= n; i++) {
        int k = i < n ? tok_stream_push(&s, ids[i], tmp, tcap) : tok_stream_flush(&s, tmp, tcap);
        if (k < 0) {
            free(tmp);
            return k;
        }
        if (total < cap) memcpy(out + total, tmp, (size_t)MIN((long)k, (long)cap - total));
        total += k;
        if (total > INT32_MAX / 2) {
            free(tmp);
            return ERR_RANGE;
        }
    }
    free(tmp);
    if (total < cap) out[total] = 0;
    return (int)total;
}

int tok_same_vocab(const tokenizer *a, const char *a_name, const tokenizer *b, const char *b_name, err_t *e) {
    int n = tok_n_vocab(a);
    if (tok_n_vocab(b) != n)
        return err_set(e, ERR_INVALID, "%s has %d tokens in its vocabulary, %s %d", b_name, tok_n_vocab(b), a_name, n);
    for (int32_t id = 0; id < n; id++) {
        const char *x = tok_piece_str(a, id), *y = tok_piece_str(b, id);
        if (strcmp(x ? x : "", y ? y : "") != 0)
            return err_set(e, ERR_INVALID, "token %d is '%.40s' in %s but '%.40s' in %s: not the same vocabulary", id,
                           y ? y : "", b_name, x ? x : "", a_name);
    }
    if (tok_bos(a) != tok_bos(b) || tok_eos(a) != tok_eos(b))
        return err_set(e, ERR_INVALID, "%s has BOS %d and EOS %d, %s BOS %d and EOS %d", b_name, tok_bos(b), tok_eos(b),
                       a_name, tok_bos(a), tok_eos(a));
    return 0;
}
