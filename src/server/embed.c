/*
 * embed.c — embeddings: OpenAI POST /v1/embeddings, Ollama POST /api/embed
 * and the older POST /api/embeddings (see embed.h, docs/server.md).
 *
 * Every input becomes one req with `embd` set (req.h), submitted to the
 * engine (decoder embedders: last-token pooling, batched beside generation,
 * prefix cache and all) or to the encoder thread (bert; sched/encoder.h).
 * The pooled vector comes back raw; here it is cut to `dimensions` (the
 * Matryoshka rule: truncation, then renormalisation) and L2-normalised.
 */
#include "embed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../sched/encoder.h"
#include "api.h"
#include "apis.h"
#include "jfield.h"
#include "oai.h"

/* At most this many inputs in one request (OpenAI's limit is 2048). */
#define EMBED_MAX_INPUTS 2048

typedef struct embed_in {
    int32_t **ids; /* (n) token ids of each input, malloc'd */
    int *n_ids;
    int n;
} embed_in;

static void in_free(embed_in *in) {
    for (int i = 0; i < in->n; i++) free(in->ids[i]);
    free(in->ids);
    free(in->n_ids);
    memset(in, 0, sizeof *in);
}

/* Embedding requests name a field quoted ('dimensions') and an input bare
 * (input[2] is empty); the OpenAI route reports the field as param. */
static const jf_style openai_names = {.quote = JF_QUOTED, .params = true}, openai_items = {.quote = JF_BARE, .params = true};
static const jf_style ollama_names = {.quote = JF_QUOTED}, ollama_items = {.quote = JF_BARE};

int embed_n_ctx(const routes_ctx *rc) { return rc->en ? engine_n_ctx(rc->en) : rc->m->cfg.n_ctx_train; }

/* Whether the served model gives embeddings, and why not (msg). */
static bool embed_capable(const routes_ctx *rc, char *msg, size_t cap) {
    const model_config *c = &rc->m->cfg;
    if (c->encoder) return true;
    if (c->pooling == MODEL_POOL_LAST) return true;
    if (c->pooling == MODEL_POOL_NONE)
        snprintf(msg, cap,
                 "the model '%.200s' is not an embedding model: its GGUF declares no %s.pooling_type (serve an "
                 "embedding model such as bge or Qwen3-Embedding)",
                 rc->model_id, c->arch_name);
    else
        snprintf(msg, cap, "the model '%.200s' declares %s pooling, which kvloom runs on encoders only (decoders: last)",
                 rc->model_id, c->pooling == MODEL_POOL_MEAN ? "mean" : "cls");
    return false;
}

/* Appends one input (at w): a string (tokenized with the model's special
 * tokens, as the model's embedding recipe expects) or an array of token
 * ids. */
static int in_add(routes_ctx *rc, embed_in *in, json_t *v, const jf *w, bool truncate) {
    int32_t *ids = NULL;
    int n = 0;
    const int n_ctx = embed_n_ctx(rc), n_vocab = tok_n_vocab(rc->tok);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        n = tok_encode(rc->tok, s, len, tok_add_bos(rc->tok), false, NULL, 0);
        if (n < 0) return jf_fail(w, NULL, "cannot be tokenized");
        ids = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        tok_encode(rc->tok, s, len, tok_add_bos(rc->tok), false, ids, n);
    } else if (json_is_array(v)) {
        n = (int)MIN(json_array_size(v), (size_t)INT32_MAX);
        ids = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (jf_token_ids(w, v, n_vocab, ids) < 0) {
            free(ids);
            return ERR_INVALID;
        }
    } else {
        return jf_fail(w, NULL, "must be a string or an array of token ids");
    }
    if (n == 0) {
        free(ids);
        return jf_fail(w, NULL, "is empty (no tokens)");
    }
    /* a decoder's prompt leaves room for the one step the engine runs on
     * it (engine_submit), so truncation cuts one token more there */
    const int n_fit = rc->en ? n_ctx - 1 : n_ctx;
    if (truncate && n > n_fit) {
        n = n_fit;
    } else if (n > n_ctx) {
        free(ids);
        return jf_fail(w, NULL, "has %d tokens, more than the model's context of %d%s", n, n_ctx,
                       rc->en ? " (--ctx raises it up to the model's training context)" : "");
    }
    in->ids[in->n] = ids;
    in->n_ids[in->n++] = n;
    return 0;
}

/* The inputs of `input`: a string, an array of strings, an array of token
 * ids, or an array of such arrays (b: the body's reader; items: the
 * inputs'). */
static int parse_inputs(routes_ctx *rc, const jf *b, const jf *items, json_t *input, bool truncate, embed_in *in) {
    memset(in, 0, sizeof *in);
    if (!input) return jf_fail(b, "input", "is required");
    bool one = json_is_string(input) ||
               (json_is_array(input) && json_array_size(input) > 0 && json_is_integer(json_array_get(input, 0)));
    if (!one && !json_is_array(input))
        return jf_fail(b, "input", "must be a string, an array of strings or an array of token ids");
    size_t n = one ? 1 : json_array_size(input);
    if (n == 0) return jf_fail(b, "input", "is an empty array: give at least one input");
    if (n > EMBED_MAX_INPUTS) return jf_fail(b, "input", "has %zu items, at most %d", n, EMBED_MAX_INPUTS);
    in->ids = xcalloc(n, sizeof *in->ids);
    in->n_ids = xcalloc(n, sizeof *in->n_ids);
    jf iw = jf_key(items, "input");
    for (size_t i = 0; i < n; i++) {
        jf w = jf_index(&iw, i);
        if (in_add(rc, in, one ? input : json_array_get(input, i), &w, truncate) < 0) {
            in_free(in);
            return ERR_INVALID;
        }
    }
    return 0;
}

/* Runs every input (all submitted first, so they batch) and writes the
 * normalised vectors of `dims` floats to out (n, dims). 0, or the HTTP
 * status with msg. */
static int run_inputs(routes_ctx *rc, const embed_in *in, int dims, float *out, char *msg, size_t cap) {
    const int D = rc->m->cfg.n_embd;
    req **rs = xcalloc((size_t)in->n, sizeof *rs);
    int status = 0;
    for (int i = 0; i < in->n && !status; i++) {
        int32_t *p = xmalloc(sizeof(int32_t) * (size_t)in->n_ids[i]);
        memcpy(p, in->ids[i], sizeof(int32_t) * (size_t)in->n_ids[i]);
        req *r = rs[i] = req_new(p, in->n_ids[i]);
        r->embd = xcalloc((size_t)D, sizeof(float));
        r->max_tokens = 1;
        err_t e = {0};
        int sr = rc->en ? engine_submit(rc->en, r, &e) : encoder_submit(rc->enc, r, &e);
        if (sr < 0) {
            status = sr == ERR_RANGE ? (strstr(e.msg, "shutting") ? 503 : 429) : 400;
            snprintf(msg, cap, "input[%d]: %s", i, e.msg);
            req_unref(r); /* never submitted: nothing would finish it */
            rs[i] = NULL;
        }
    }
    for (int i = 0; i < in->n; i++) {
        req *r = rs[i];
        if (!r) continue;
        if (status) req_cancel(r);
        req_finish fin = REQ_RUNNING;
        while (fin == REQ_RUNNING) req_wait(r, 0, 1000, &fin);
        char err[256] = "";
        fin = req_get_finish(r, NULL, err, sizeof err);
        if (!status && fin != REQ_FINISH_STOP) {
            status = fin == REQ_FINISH_CANCEL ? 503 : 500;
            snprintf(msg, cap, "input[%d]: %s", i,
                     fin == REQ_FINISH_CANCEL ? "cancelled (the server is shutting down)"
                     : fin == REQ_FINISH_LENGTH ? "does not fit in the KV pool (--kv-mem raises it)"
                                                : err);
            if (fin == REQ_FINISH_LENGTH) status = 400;
        }
        if (!status) {
            double ss = 0;
            for (int k = 0; k < dims; k++) ss += (double)r->embd[k] * r->embd[k];
            float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
            for (int k = 0; k < dims; k++) out[(size_t)i * dims + k] = r->embd[k] * inv;
        }
        req_unref(r);
    }
    free(rs);
    return status;
}

static json_t *vec_json(const float *v, int n) {
    json_t *a = json_array();
    for (int k = 0; k < n; k++) json_array_append_new(a, json_real(v[k]));
    return a;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 of the little-endian float32 bytes (what the openai client decodes). */
static json_t *vec_base64(const float *v, int n) {
    size_t nb = (size_t)n * 4, len = (nb + 2) / 3 * 4;
    unsigned char *raw = xmalloc(nb);
    for (int k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        for (int b = 0; b < 4; b++) raw[4 * k + b] = (unsigned char)(u >> (8 * b));
    }
    char *s = xmalloc(len + 1);
    size_t o = 0;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t w = (uint32_t)raw[i] << 16 | (i + 1 < nb ? (uint32_t)raw[i + 1] << 8 : 0) | (i + 2 < nb ? raw[i + 2] : 0);
        s[o++] = b64[w >> 18 & 63];
        s[o++] = b64[w >> 12 & 63];
        s[o++] = i + 1 < nb ? b64[w >> 6 & 63] : '=';
        s[o++] = i + 2 < nb ? b64[w & 63] : '=';
    }
    s[o] = 0;
    json_t *j = json_string(s);
    free(s);
    free(raw);
    return j;
}



/* dimensions: absent = the model's; else 1..n_embd. */
static int parse_dims(const routes_ctx *rc, const jf *b, json_t *body, int *dims) {
    const int D = rc->m->cfg.n_embd;
    char what[96];
    json_t *d;
    snprintf(what, sizeof what, "an integer from 1 to %d (the model's embedding size)", D);
    if (jf_int_in(b, body, "dimensions", 1, D, what, &d) < 0) return ERR_INVALID;
    *dims = d ? (int)json_integer_value(d) : D;
    return 0;
}

void embed_openai(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    json_t *body = api_body_json(&api_openai, x);
    if (!body) return;
    char msg[640];
    embed_in in = {0};
    int dims = 0, status, format = 0;
    static const char *const formats[] = {"float", "base64"};
    oai_error err;
    jf b = jf_body(&openai_names, &err), items = jf_body(&openai_items, &err);
    bool capable = embed_capable(rc, msg, sizeof msg);
    bool refused = capable && (jf_enum(&b, body, "encoding_format", formats, ARRAY_LEN(formats), &format) < 0 ||
                               parse_dims(rc, &b, body, &dims) < 0 ||
                               parse_inputs(rc, &b, &items, oai_field(body, "input"), false, &in) < 0);
    json_decref(body);
    if (!capable) oai_reply_error(x, 400, msg, "model", NULL);
    else if (refused) api_reply_refusal(&api_openai, x, &err);
    if (!capable || refused) return;
    bool b64_out = format == 1;
    float *vecs = xmalloc(sizeof(float) * (size_t)in.n * (size_t)dims);
    status = run_inputs(rc, &in, dims, vecs, msg, sizeof msg);
    if (status) {
        oai_reply_error(x, status, msg, status == 400 ? "input" : NULL, NULL);
    } else {
        json_t *data = json_array();
        long n_tok = 0;
        for (int i = 0; i < in.n; i++) {
            const float *v = vecs + (size_t)i * dims;
            json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding",
                                                  b64_out ? vec_base64(v, dims) : vec_json(v, dims)));
            n_tok += in.n_ids[i];
        }
        json_t *o = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model", rc->model_id,
                              "usage", "prompt_tokens", (json_int_t)n_tok, "total_tokens", (json_int_t)n_tok);
        api_reply_json(&api_openai, x, o);
        json_decref(o);
    }
    free(vecs);
    in_free(&in);
}

void embed_ollama(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    bool legacy = !strcmp(rt->path, "/api/embeddings");
    int64_t t0 = clock_ns();
    char msg[640];
    json_t *body = api_body_json(&api_ollama_api, x);
    if (!body) return;
    embed_in in = {0};
    int dims = 0, status;
    oai_error err;
    jf b = jf_body(&ollama_names, &err), items = jf_body(&ollama_items, &err);
    /* /api/embed: "input" (string or strings), "truncate" (default true),
     * "dimensions"; /api/embeddings: "prompt" (one string) */
    json_t *input = oai_field(body, legacy ? "prompt" : "input"), *tr = NULL;
    bool capable = embed_capable(rc, msg, sizeof msg);
    bool refused = capable && (jf_get(&b, body, "truncate", JF_BOOL, "true or false", &tr) < 0 ||
                               (legacy && jf_get(&b, body, "prompt", JF_STRING | JF_REQUIRED, NULL, &input) < 0) ||
                               parse_dims(rc, &b, body, &dims) < 0 ||
                               parse_inputs(rc, &b, &items, input, !tr || json_is_true(tr), &in) < 0);
    json_decref(body);
    if (!capable) api_reply_error(&api_ollama_api, x, 400, msg, NULL, NULL);
    else if (refused) api_reply_refusal(&api_ollama_api, x, &err);
    if (!capable || refused) return;
    float *vecs = xmalloc(sizeof(float) * (size_t)in.n * (size_t)dims);
    status = run_inputs(rc, &in, dims, vecs, msg, sizeof msg);
    if (status) {
        api_reply_error(&api_ollama_api, x, status, msg, NULL, NULL);
    } else {
        json_t *o;
        long n_tok = 0;
        for (int i = 0; i < in.n; i++) n_tok += in.n_ids[i];
        if (legacy) {
            o = json_pack("{s:o}", "embedding", vec_json(vecs, dims));
        } else {
            json_t *all = json_array();
            for (int i = 0; i < in.n; i++) json_array_append_new(all, vec_json(vecs + (size_t)i * dims, dims));
            o = json_pack("{s:s, s:o, s:I, s:I, s:I}", "model", rc->model_id, "embeddings", all, "total_duration",
                          (json_int_t)(clock_ns() - t0), "load_duration", (json_int_t)0, "prompt_eval_count",
                          (json_int_t)n_tok);
        }
        api_reply_json(&api_ollama_api, x, o);
        json_decref(o);
    }
    free(vecs);
    in_free(&in);
}
