/*
 * api_ollama.c — the Ollama API (apis.h; docs/server.md "Ollama API"):
 *
 *   POST /api/chat       messages ─▶ OpenAI chat body ─▶ oai_parse ─▶ gen_start
 *   POST /api/generate   prompt (+ system) as a chat, or raw as a completion
 *   GET  /api/tags       the one model, with size, digest and details
 *   POST /api/show       its template, details, metadata and capabilities
 *   GET  /api/version    {"version": OLLAMA_VERSION}
 *
 * Place in the flow: server/, on the HTTP thread of the request, dispatched
 * by routes.c after the API key check. The generation routes translate the
 * Ollama request into an OpenAI-shaped JSON body and hand it to oai_parse, so
 * every rule of the OpenAI routes (ranges, tools, schemas, grammars) holds
 * here too, and gen_start runs it (tools and structured output constrained
 * alike). The events of generate.h come back in Ollama's shapes:
 *
 *   streaming (the default): application/x-ndjson, one object per line
 *     {"model","created_at","message":{"role","content"[,"thinking"]},"done":false}
 *     ...
 *     {"model","created_at","message":{"role","content":""[,"tool_calls"]},
 *      "done":true,"done_reason","total_duration",...,"eval_duration"}
 *   whole: the last line's shape with the whole text.
 *   /api/generate: "response" (and "thinking") instead of "message".
 *
 * With "logprobs": true, each line (and a whole answer) carries the entries
 * of its tokens at the top level, [{"token","logprob","bytes",
 * "top_logprobs":[...]}], as Ollama does.
 *
 * Tool calls are sent once complete (a call is only known to be complete
 * when the generation ends), so in a stream they ride on the last line.
 *
 * Errors are {"error": "message naming the field"} with 400 (bad input), 404
 * (a model this server does not serve), 429/500/503 (from the engine). A
 * failure after a stream started is an {"error": ...} line, as Ollama does.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../kern/types.h"
#include "../chat/chat.h"
#include "api.h"
#include "apis.h"
#include "embed.h"
#include "generate.h"
#include "jfield.h"
#include "server.h"
#include "oai.h"

/* The Ollama version we answer /api/version with: 0.9.0 is the first whose
 * API has everything implemented here (format schemas 0.5, tool calls in
 * streams 0.8, "think" 0.9), so a client that gates a feature on the
 * server's version finds these enabled. */
#define OLLAMA_VERSION "0.9.0"

/* Sampling defaults of Ollama (its api.DefaultOptions) used when the request
 * does not set them, so that clients tuned for Ollama sample alike. */
#define OLLAMA_TEMPERATURE 0.8
#define OLLAMA_TOP_K 40
#define OLLAMA_TOP_P 0.9

/* ---- replies ---- */

static char *error_json(int status, const char *msg, const char *param, const char *code) {
    (void)status, (void)param, (void)code; /* {"error": msg} and nothing else */
    json_t *o = json_pack("{s:s}", "error", msg);
    if (!o) o = json_pack("{s:s}", "error", "invalid request"); /* msg was not UTF-8 */
    char *s = oai_json_dump(o);
    json_decref(o);
    return s ? s : xstrdup("{\"error\":\"out of memory\"}");
}


static void reply_error(http_exchange *x, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reply_error(http_exchange *x, int status, const char *fmt, ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_reply_error(&api_ollama_api, x, status, msg, NULL, NULL);
}


static json_t *body_object(http_exchange *x) { return api_body_json(&api_ollama_api, x); }

/* RFC 3339 in UTC with nanoseconds, as Go writes time.Time. */
static void rfc3339(const struct timespec *ts, char *buf, size_t cap) {
    struct tm tm;
    time_t t = ts->tv_sec;
    gmtime_r(&t, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%09ldZ", day, (long)ts->tv_nsec);
}

static json_t *now_json(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char buf[64];
    rfc3339(&ts, buf, sizeof buf);
    return json_string(buf);
}

/* ---- the model ---- */

/* Ollama names carry a tag ("x:latest"); ours is the model id, with or
 * without ":latest". */
static bool model_name_ok(const routes_ctx *rc, const char *name) {
    size_t n = strlen(rc->model_id);
    return !strcmp(name, rc->model_id) || (!strncmp(name, rc->model_id, n) && !strcmp(name + n, ":latest"));
}

/* The "model" field (or Ollama's older "name"): answers 400 or 404 and
 * returns NULL when it is missing or names another model. */
static const char *check_model(routes_ctx *rc, http_exchange *x, json_t *body) {
    json_t *m = oai_field(body, "model");
    if (!m) m = oai_field(body, "name");
    if (!m) {
        reply_error(x, 400, "'model' is required");
        return NULL;
    }
    if (!json_is_string(m)) {
        reply_error(x, 400, "'model' must be a string");
        return NULL;
    }
    if (!model_name_ok(rc, json_string_value(m))) {
        reply_error(x, 404, "model '%.200s' not found", json_string_value(m));
        return NULL;
    }
    return json_string_value(m);
}

static const char *model_path(const routes_ctx *rc) {
    return rc->model_path ? rc->model_path : SERVER_DEFAULT_MODEL;
}

static int64_t n_params(const model *m) {
    int64_t n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) n += gguf_tensor_at(m->gguf, i)->n_elems;
    return n;
}

/* "260.1K", "596M", "7.6B": three significant digits, as Ollama shows. */
static void human_count(int64_t n, char *buf, size_t cap) {
    static const char units[] = "KMBT";
    double v = (double)n;
    int u = -1;
    while (v >= 1000 && u < 3) v /= 1000, u++;
    if (u < 0) {
        snprintf(buf, cap, "%lld", (long long)n);
        return;
    }
    snprintf(buf, cap, v >= 100 ? "%.0f%c" : v >= 10 ? "%.1f%c" : "%.2f%c", v, units[u]);
}

/* The weights' type: llama.cpp's general.file_type when the file has it
 * (it names mixes such as Q4_K_M), else the type holding most elements of
 * the 2-D tensors. */
static const char *quant_level(const model *m) {
    int64_t ft;
    if (gguf_get_i64(m->gguf, "general.file_type", &ft) && dtype_file_type_name(ft)) return dtype_file_type_name(ft);
    int64_t per_type[DT_COUNT] = {0};
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (t->n_dims >= 2 && t->type < DT_COUNT) per_type[t->type] += t->n_elems;
    }
    int best = 0;
    for (int t = 1; t < DT_COUNT; t++)
        if (per_type[t] > per_type[best]) best = t;
    return dtype_name((uint32_t)best);
}

static json_t *details_json(const routes_ctx *rc) {
    char size[32];
    human_count(n_params(rc->m), size, sizeof size);
    const char *arch = rc->m->cfg.arch_name;
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf", "family", arch,
                     "families", arch, "parameter_size", size, "quantization_level", quant_level(rc->m));
}

static json_t *modified_at_json(const routes_ctx *rc) {
    struct stat st;
    struct timespec ts = {(time_t)rc->created, 0};
    if (stat(model_path(rc), &st) == 0) ts = st.st_mtim;
    char buf[64];
    rfc3339(&ts, buf, sizeof buf);
    return json_string(buf);
}

/* ---- GET /api/tags, POST /api/show, GET /api/version ---- */

void api_ollama_tags(routes_ctx *rc, http_exchange *x) {
    size_t size = gguf_file_size(rc->m->gguf);
    /* The digest names this model file: the SHA-256 of "<model id>\n<file
     * bytes>" (hashing gigabytes of weights per listing would be slow; a
     * new file under the same name almost always has another size). */
    char text[320], digest[65];
    int n = snprintf(text, sizeof text, "%s\n%zu", rc->model_id, size);
    sha256_hex(text, (size_t)n, digest);
    json_t *m = json_pack("{s:s, s:s, s:o, s:I, s:s, s:o}", "name", rc->model_id, "model", rc->model_id, "modified_at",
                          modified_at_json(rc), "size", (json_int_t)size, "digest", digest, "details",
                          details_json(rc));
    json_t *o = json_pack("{s:[o]}", "models", m);
    api_reply_json(&api_ollama_api, x, o);
    json_decref(o);
}

/* The metadata of the GGUF file as Ollama's model_info: scalar keys with
 * their values; arrays (the vocabulary...) and the chat template (given as
 * "template") are left out. */
static json_t *model_info_json(const routes_ctx *rc) {
    const gguf_ctx *g = rc->m->gguf;
    json_t *info = json_object();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str ks = gguf_key(g, i);
        char key[256];
        if (!ks.ptr || ks.len >= sizeof key) continue;
        memcpy(key, ks.ptr, ks.len);
        key[ks.len] = 0;
        if (!strcmp(key, "tokenizer.chat_template")) continue;
        json_t *v = NULL;
        gguf_vtype t = gguf_kv_type(g, i);
        int64_t iv;
        float fv;
        bool bv;
        gguf_str sv;
        if (t == GGUF_FLOAT32 || t == GGUF_FLOAT64) {
            if (gguf_get_f32(g, key, &fv)) v = json_real((double)fv);
        } else if (t == GGUF_BOOL) {
            if (gguf_get_bool(g, key, &bv)) v = json_boolean(bv);
        } else if (t == GGUF_STRING) {
            if (gguf_get_str(g, key, &sv)) v = json_stringn(sv.ptr, (size_t)sv.len); /* NULL if not UTF-8 */
        } else if (t != GGUF_ARRAY) {
            if (gguf_get_i64(g, key, &iv)) v = json_integer((json_int_t)iv);
        }
        if (v) json_object_set_new(info, key, v);
    }
    const model_config *c = &rc->m->cfg;
    char key[96];
    if (!json_object_get(info, "general.architecture")) json_object_set_new(info, "general.architecture", json_string(c->arch_name));
    json_object_set_new(info, "general.parameter_count", json_integer((json_int_t)n_params(rc->m)));
    snprintf(key, sizeof key, "%s.context_length", c->arch_name);
    if (!json_object_get(info, key)) json_object_set_new(info, key, json_integer(c->n_ctx_train));
    return info;
}


void api_ollama_show(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    json_t *body = body_object(x);
    if (!body) return;
    if (!check_model(rc, x, body)) {
        json_decref(body);
        return;
    }
    json_decref(body);
    char *tmpl = routes_template_source(rc);
    json_t *t = json_string(tmpl);
    free(tmpl);
    /* Ollama's capabilities: an encoder only embeds; a decoder that
     * declares pooling embeds too */
    json_t *caps = rc->m->cfg.encoder ? json_pack("[s]", "embedding") : json_pack("[s, s]", "completion", "tools");
    if (!rc->m->cfg.encoder && rc->m->cfg.pooling != MODEL_POOL_NONE) json_array_append_new(caps, json_string("embedding"));
    if (rc->reasoning) json_array_append_new(caps, json_string("thinking"));
    json_t *o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "modelfile", "", "parameters", "", "template",
                          t ? t : json_string(""), "details", details_json(rc), "model_info", model_info_json(rc),
                          "capabilities", caps, "modified_at", modified_at_json(rc));
    api_reply_json(&api_ollama_api, x, o);
    json_decref(o);
}

/* ---- request translation: Ollama body -> OpenAI body ---- */

/* Ollama's paths are the body's, quoted ('messages[2].role'); its errors
 * name the field in the message, not in a param. */
static const jf_style names = {.quote = JF_QUOTED};

/* options: the sampling fields under their OpenAI names (oai_parse checks
 * types and ranges; its messages are renamed back by ollama_param). Options
 * that have no meaning here (num_ctx: the context is the server's;
 * num_thread, num_gpu, mirostat...) are ignored, as Ollama ignores what a
 * runner does not use. */
static int map_options(const jf *b, json_t *body, json_t *oai) {
    static const char *const same[] = {"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                                       "frequency_penalty", "stop"};
    json_object_set_new(oai, "temperature", json_real(OLLAMA_TEMPERATURE));
    json_object_set_new(oai, "top_k", json_integer(OLLAMA_TOP_K));
    json_object_set_new(oai, "top_p", json_real(OLLAMA_TOP_P));
    json_t *opts;
    if (jf_get(b, body, "options", JF_OBJECT, NULL, &opts) < 0) return ERR_INVALID;
    if (!opts) return 0;
    for (size_t i = 0; i < ARRAY_LEN(same); i++) {
        json_t *v = oai_field(opts, same[i]);
        if (v) json_object_set(oai, same[i], v);
    }
    json_t *rp = oai_field(opts, "repeat_penalty");
    if (rp) json_object_set(oai, "repetition_penalty", rp);
    /* num_predict: -1 (infinite) and -2 (fill the context) and 0 mean no
     * limit but the context's */
    json_t *np = oai_field(opts, "num_predict");
    if (np && !(json_is_number(np) && json_number_value(np) <= 0)) json_object_set(oai, "max_tokens", np);
    return 0;
}

/* format: "json" -> json_object, a JSON Schema object -> json_schema, ""
 * -> none. */
static int map_format(const jf *b, json_t *body, json_t *oai) {
    json_t *fmt = oai_field(body, "format");
    if (!fmt || (json_is_string(fmt) && json_string_length(fmt) == 0)) return 0;
    if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "json")) {
        json_object_set_new(oai, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (json_is_object(fmt)) {
        json_object_set(oai, "json_schema", fmt);
        return 0;
    }
    return jf_fail(b, "format", "must be \"json\" or a JSON Schema object");
}

/* think: true / false, or a level ("high", "medium", "low": on). */
static int map_think(routes_ctx *rc, const jf *b, json_t *body, json_t *oai) {
    json_t *think = oai_field(body, "think");
    if (!think) return 0;
    bool on;
    if (json_is_boolean(think)) {
        on = json_is_true(think);
    } else if (json_is_string(think) && (!strcmp(json_string_value(think), "high") ||
                                         !strcmp(json_string_value(think), "medium") ||
                                         !strcmp(json_string_value(think), "low"))) {
        on = true;
    } else {
        return jf_fail(b, "think", "must be a boolean or \"high\", \"medium\", \"low\"");
    }
    if (on && !rc->reasoning) return api_bad(b->err, NULL, "'think': the model '%.200s' does not support thinking", rc->model_id);
    json_object_set_new(oai, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    return 0;
}

/* images (Ollama sends base64 pictures): refused, there is no vision
 * encoder; an empty list is fine. */
static int check_images(const jf *w, json_t *o) {
    json_t *images;
    if (jf_get(w, o, "images", JF_ARRAY, "an array of base64 images", &images) < 0) return ERR_INVALID;
    if (!json_array_size(images)) return 0;
    jf iw = jf_key(w, "images");
    return api_bad(w->err, NULL, "'%s': images are not supported (the model has no vision encoder)", iw.path);
}

/* A pending assistant tool call, for tool messages that do not name one. */
typedef struct pending_call {
    const char *id, *name;
    bool answered;
} pending_call;

/* messages: Ollama's shape to OpenAI's. Assistant tool_calls get ids
 * ("call_<message>_<call>" unless the client sent one) and each tool
 * message the id of the call it answers: the one its tool_call_id names,
 * else the first unanswered call of the latest assistant message named
 * tool_name, else its first unanswered call, else its last. */
static int map_messages(const jf *b, json_t *msgs, json_t *oai) {
    if (!json_is_array(msgs)) return jf_fail(b, "messages", "must be an array");
    json_t *out = json_array();
    json_object_set_new(oai, "messages", out);
    pending_call pend[TC_MAX_TOOLS * 2];
    int n_pend = 0;
    jf ms = jf_key(b, "messages");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i), *role, *content, *thinking;
        jf mi = jf_index(&ms, i);
        if (!json_is_object(m)) return jf_fail(&mi, NULL, "must be an object");
        if (jf_get(&mi, m, "role", JF_STRING | JF_REQUIRED, NULL, &role) < 0) return ERR_INVALID;
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return jf_fail(&mi, "role", "must be \"system\", \"user\", \"assistant\" or \"tool\"; got \"%.40s\"", r);
        if (jf_get(&mi, m, "content", JF_STRING, NULL, &content) < 0 || check_images(&mi, m) < 0) return ERR_INVALID;
        json_t *o = json_pack("{s:s}", "role", r);
        json_object_set_new(o, "content", content ? json_incref(content) : json_string(""));
        if (json_array_append_new(out, o) < 0) return api_bad(b->err, NULL, "out of memory"); /* o freed; counted: a 503 */
        if (jf_get(&mi, m, "thinking", JF_STRING, NULL, &thinking) < 0) return ERR_INVALID;
        if (thinking && !strcmp(r, "assistant")) json_object_set(o, "reasoning_content", thinking);
        json_t *calls = oai_field(m, "tool_calls");
        if (calls) {
            if (strcmp(r, "assistant")) return jf_fail(&mi, "tool_calls", "is only allowed in assistant messages");
            if (!json_is_array(calls)) return jf_fail(&mi, "tool_calls", "must be an array");
            if (json_array_size(calls) > ARRAY_LEN(pend))
                return jf_fail(&mi, "tool_calls", "holds more than %zu calls", ARRAY_LEN(pend));
            json_t *oc = json_array();
            json_object_set_new(o, "tool_calls", oc);
            n_pend = 0;
            jf cs = jf_key(&mi, "tool_calls");
            for (size_t j = 0; j < json_array_size(calls); j++) {
                json_t *c = json_array_get(calls, j), *id;
                jf cj = jf_index(&cs, j);
                json_t *fn = json_is_object(c) ? oai_field(c, "function") : NULL;
                json_t *name = json_is_object(fn) ? oai_field(fn, "name") : NULL;
                json_t *args = json_is_object(fn) ? oai_field(fn, "arguments") : NULL;
                if (!json_is_string(name)) return jf_fail(&cj, "function.name", "must be a string");
                if (args && !json_is_object(args) && !json_is_string(args))
                    return jf_fail(&cj, "function.arguments", "must be an object");
                if (jf_get(&cj, c, "id", JF_STRING, NULL, &id) < 0) return ERR_INVALID;
                char made[48];
                snprintf(made, sizeof made, "call_%zu_%zu", i, j);
                json_t *call = json_pack("{s:s, s:s, s:{s:O, s:o}}", "id", id ? json_string_value(id) : made, "type",
                                         "function", "function", "name", name, "arguments",
                                         args ? json_incref(args) : json_object());
                if (json_array_append_new(oc, call) < 0) return api_bad(b->err, NULL, "out of memory"); /* call freed */
                pend[n_pend++] = (pending_call){json_string_value(json_object_get(call, "id")), json_string_value(name),
                                                false};
            }
        }
        if (!strcmp(r, "tool")) {
            json_t *tname, *tid;
            if (jf_get(&mi, m, "tool_name", JF_STRING, NULL, &tname) < 0 ||
                jf_get(&mi, m, "tool_call_id", JF_STRING, NULL, &tid) < 0)
                return ERR_INVALID;
            int k = -1;
            for (int j = 0; tid && j < n_pend && k < 0; j++)
                if (!strcmp(pend[j].id, json_string_value(tid))) k = j;
            for (int j = 0; tname && j < n_pend && k < 0; j++)
                if (!pend[j].answered && !strcmp(pend[j].name, json_string_value(tname))) k = j;
            for (int j = 0; j < n_pend && k < 0; j++)
                if (!pend[j].answered) k = j;
            if (k < 0 && n_pend) k = n_pend - 1;
            if (k < 0)
                return api_bad(b->err, NULL, "'%s': a tool message must follow an assistant message with tool_calls", mi.path);
            pend[k].answered = true;
            json_object_set_new(o, "tool_call_id", json_string(pend[k].id));
            if (tname) json_object_set(o, "name", tname);
        }
    }
    return 0;
}

/* The Ollama name of an OpenAI field named in an oai_parse or gen_start
 * error (NULL: none to name). */
static const char *param_name(const char *p) {
    static const char *const map[][2] = {
        {"temperature", "options.temperature"}, {"top_p", "options.top_p"}, {"top_k", "options.top_k"},
        {"min_p", "options.min_p"}, {"seed", "options.seed"}, {"max_tokens", "options.num_predict"},
        {"stop", "options.stop"}, {"repetition_penalty", "options.repeat_penalty"},
        {"presence_penalty", "options.presence_penalty"}, {"frequency_penalty", "options.frequency_penalty"},
        {"json_schema", "format"}, {"response_format", "format"}, {"chat_template_kwargs", "think"},
    };
    for (size_t i = 0; p && i < ARRAY_LEN(map); i++)
        if (!strcmp(map[i][0], p)) return map[i][1];
    return NULL;
}

/* ---- answers (api_serve's callbacks, api.h) ---- */

/* One generation's Ollama side (api_answer.ctx). The calls are the answer's
 * CALL segments. */
typedef struct olla_out {
    bool chat;            /* /api/chat ("message") vs /api/generate ("response") */
    char model[256];      /* the name as the client gave it                     */
    int64_t t_end_ns;     /* end of generation (clock_ns)                       */
    sbuf content, thinking; /* whole answers: everything; streams: the delta */
    oai_kind kind;        /* the OpenAI shape of the logprobs gen_poll writes   */
    bool logprobs;        /* the request asked for them                         */
    json_t *lp;           /* Ollama logprobs entries not sent yet (array)       */
} olla_out;

static void out_free(void *ctx) {
    olla_out *o = ctx;
    sbuf_free(&o->content);
    sbuf_free(&o->thinking);
    json_decref(o->lp);
    free(o);
}

/* A string's bytes as an array of integers. */
static json_t *bytes_json(const char *s) {
    json_t *a = json_array();
    for (; s && *s; s++) json_array_append_new(a, json_integer((unsigned char)*s));
    return a;
}

/* One token (or alternative) in Ollama's shape: {"token", "logprob",
 * "bytes"}. A chat's bytes are the token's own; a raw generate's are its
 * text's (what the completions route names it by). */
static json_t *lp_entry(const tokenizer *tk, bool chat, int32_t id, float logprob) {
    json_t *bytes = NULL;
    json_t *tok = gen_piece_json(tk, id, chat ? &bytes : NULL);
    if (!chat) bytes = bytes_json(json_string_value(tok));
    return json_pack("{s:o, s:o, s:o}", "token", tok, "logprob", gen_logprob_json(logprob), "bytes", bytes);
}

/* Appends the entries of l to o->lp in Ollama's shape: [{"token",
 * "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}];
 * a raw generate names an alternative once (the first of those whose text
 * is the same), as the completions route does. */
static void lp_take(const tokenizer *tk, olla_out *o, const gen_logprobs *l) {
    bool chat = o->kind == OAI_CHAT;
    for (int j = 0; j < l->n; j++) {
        const req_token *t = &l->v[j].t;
        json_t *e = lp_entry(tk, chat, t->id, t->logprob), *alts = json_array();
        for (int i = 0; i < t->n_top; i++) {
            json_t *alt = lp_entry(tk, chat, t->top_ids[i], t->top_lps[i]);
            const char *ts = json_string_value(json_object_get(alt, "token"));
            bool seen = false;
            for (size_t k = 0; !chat && ts && k < json_array_size(alts); k++)
                seen |= !strcmp(json_string_value(json_object_get(json_array_get(alts, k), "token")), ts);
            if (seen) json_decref(alt);
            else json_array_append_new(alts, alt);
        }
        json_object_set_new(e, "top_logprobs", alts);
        json_array_append_new(o->lp, e);
    }
}

/* Polls once, the logprobs too. */
static bool out_poll(api_answer *a, int timeout_ms) {
    olla_out *o = a->ctx;
    gen_logprobs l = {0};
    bool done = gen_poll(a->g, timeout_ms, &a->ev, o->logprobs ? &l : NULL);
    lp_take(a->rc->tok, o, &l);
    gen_logprobs_free(&l);
    if (done) o->t_end_ns = clock_ns();
    return done;
}

/* Text and thinking go to the next line; a call's arguments stay in its
 * segment (the last line carries the complete calls). */
static void out_open(api_answer *a, int i) { (void)a, (void)i; }
static void out_close(api_answer *a, int i) { (void)a, (void)i; }
static void out_delta(api_answer *a, int i, const char *text, size_t n) {
    olla_out *o = a->ctx;
    if (a->segs[i].kind != API_SEG_CALL) sbuf_put(a->segs[i].kind == API_SEG_TEXT ? &o->content : &o->thinking, text, n);
}

/* {"model","created_at"} + "message" {role, content, thinking?} or
 * "response" (+ "thinking"?), from the current buffers (then emptied). */
static json_t *line_new(api_answer *a, bool with_calls) {
    olla_out *o = a->ctx;
    json_t *l = json_pack("{s:s, s:o}", "model", o->model, "created_at", now_json());
    json_t *holder = l;
    if (o->chat) {
        holder = json_pack("{s:s}", "role", "assistant");
        /* a failed set frees holder (out of memory, counted: the answer is
         * a 500): fill nothing rather than a freed object */
        if (json_object_set_new(l, "message", holder) < 0) holder = NULL;
    }
    json_object_set_new(holder, o->chat ? "content" : "response", oai_buf_json(&o->content));
    if (o->thinking.n) json_object_set_new(holder, "thinking", oai_buf_json(&o->thinking));
    o->content.n = o->thinking.n = 0;
    if (o->logprobs && json_array_size(o->lp)) {
        json_object_set_new(l, "logprobs", o->lp);
        o->lp = json_array();
    }
    /* complete calls only: those before gen_n_calls */
    int n = with_calls ? gen_n_calls(a->g) : 0;
    if (o->chat && n > 0) {
        json_t *calls = json_array();
        for (int i = 0; i < a->n_segs; i++) {
            const api_seg *c = &a->segs[i];
            if (c->kind != API_SEG_CALL || c->call_index >= n) continue;
            json_t *args = json_loadb(c->text.p ? c->text.p : "", c->text.n, 0, NULL);
            if (!json_is_object(args)) {
                json_decref(args);
                args = json_object(); /* the parser only completes calls whose arguments parse */
            }
            json_array_append_new(calls, json_pack("{s:{s:s, s:o}}", "function", "name", c->name, "arguments", args));
        }
        json_object_set_new(holder, "tool_calls", calls);
    }
    return l;
}

/* The last line: done, the reason and the counts (durations in ns). */
static json_t *final_new(api_answer *a) {
    olla_out *o = a->ctx;
    json_t *l = line_new(a, true);
    const char *fr = gen_finish_reason(a->g);
    int n_prompt = 0, n_gen = 0;
    gen_usage(a->g, &n_prompt, &n_gen, NULL);
    int64_t end = o->t_end_ns ? o->t_end_ns : clock_ns();
    int64_t first = gen_first_token_ns(a->g) ? gen_first_token_ns(a->g) : end;
    int64_t eval = end - first;
    if (eval <= 0 && n_gen > 0) eval = 1; /* clients divide by it */
    json_object_set_new(l, "done", json_true());
    json_object_set_new(l, "done_reason", json_string(fr && !strcmp(fr, "length") ? "length" : "stop"));
    json_object_set_new(l, "total_duration", json_integer((json_int_t)(clock_ns() - a->t0_ns)));
    json_object_set_new(l, "load_duration", json_integer(0));
    json_object_set_new(l, "prompt_eval_count", json_integer(n_prompt));
    json_object_set_new(l, "prompt_eval_duration", json_integer((json_int_t)(first - a->t0_ns)));
    json_object_set_new(l, "eval_count", json_integer(n_gen));
    json_object_set_new(l, "eval_duration", json_integer((json_int_t)eval));
    return l;
}

/* A stream's line of the text (and logprobs) produced since the last. */
static void out_polled(api_answer *a) {
    olla_out *o = a->ctx;
    if (!a->stream || !(o->content.n || o->thinking.n || json_array_size(o->lp))) return;
    json_t *l = line_new(a, false);
    json_object_set_new(l, "done", json_false());
    api_emit(a, NULL, l);
}

static json_t *out_finish(api_answer *a) {
    if (!a->stream) return final_new(a);
    /* text released at the end (held stop-string prefixes, a cut call) goes
     * in a line of its own: the last line carries only the calls */
    out_polled(a);
    api_emit(a, NULL, final_new(a));
    return NULL;
}

static void out_fail(api_answer *a, const char *msg, int status) {
    (void)status;
    api_emit(a, NULL, json_pack("{s:s}", "error", msg));
}

/* An empty prompt (or no messages) loads the model in Ollama: answered at
 * once with done_reason "load". */
static void answer_load(http_exchange *x, bool chat, const char *model, bool stream) {
    json_t *l = json_pack("{s:s, s:o}", "model", model, "created_at", now_json());
    if (chat)
        json_object_set_new(l, "message", json_pack("{s:s, s:s}", "role", "assistant", "content", ""));
    else
        json_object_set_new(l, "response", json_string(""));
    json_object_set_new(l, "done", json_true());
    json_object_set_new(l, "done_reason", json_string("load"));
    sbuf b = {0};
    api_frame(&b, API_NDJSON, NULL, l);
    if (oai_json_failed() || !b.n)
        reply_error(x, 500, "out of memory building the answer");
    else
        http_reply(x, 200, stream ? "application/x-ndjson" : "application/json", b.p, b.n, NULL, NULL);
    sbuf_free(&b);
}

/* ---- POST /api/chat, POST /api/generate ---- */

/* Builds the OpenAI body of a chat or generate request. Returns 1 when it
 * should run, 0 for a load-only request, -1 on error (f). */
static int translate(routes_ctx *rc, json_t *body, bool chat, json_t *oai, oai_kind *kind, oai_error *err) {
    jf b = jf_body(&names, err);
    json_t *stream, *lp, *top;
    if (jf_get(&b, body, "stream", JF_BOOL, NULL, &stream) < 0) return ERR_INVALID;
    json_object_set_new(oai, "stream", json_boolean(!stream || json_is_true(stream)));
    if (map_options(&b, body, oai) < 0 || map_format(&b, body, oai) < 0) return ERR_INVALID;
    /* kvloom's tenant fields, named as on the OpenAI routes */
    static const char *const tenant[] = {"priority", "cache_salt", "user"};
    for (size_t i = 0; i < ARRAY_LEN(tenant); i++)
        if (oai_field(body, tenant[i])) json_object_set(oai, tenant[i], oai_field(body, tenant[i]));
    if (jf_get(&b, body, "logprobs", JF_BOOL, NULL, &lp) < 0) return ERR_INVALID;
    bool want_lp = json_is_true(lp);
    if (oai_field(body, "top_logprobs") && !want_lp) return jf_fail(&b, "top_logprobs", "requires 'logprobs' to be true");
    if (jf_int_in(&b, body, "top_logprobs", 0, 20, "an integer in [0, 20]", &top) < 0) return ERR_INVALID;
    *kind = OAI_CHAT;
    if (chat) {
        json_t *msgs = oai_field(body, "messages");
        if (check_images(&b, body) < 0) return ERR_INVALID;
        if (!msgs || (json_is_array(msgs) && json_array_size(msgs) == 0)) return 0;
        if (map_messages(&b, msgs, oai) < 0) return ERR_INVALID;
        if (want_lp) {
            json_object_set_new(oai, "logprobs", json_true());
            if (top) json_object_set(oai, "top_logprobs", top);
        }
        json_t *tools = oai_field(body, "tools");
        if (tools) json_object_set(oai, "tools", tools);
        /* extensions: Ollama has no tool_choice; the OpenAI values force a
         * call ("required", a function) or forbid one ("none"), and
         * parallel_tool_calls false allows one call only */
        static const char *const ext[] = {"tool_choice", "parallel_tool_calls"};
        for (size_t i = 0; i < ARRAY_LEN(ext); i++)
            if (oai_field(body, ext[i])) json_object_set(oai, ext[i], oai_field(body, ext[i]));
        return map_think(rc, &b, body, oai) < 0 ? ERR_INVALID : 1;
    }
    json_t *prompt, *system, *raw, *suffix, *tmpl, *ctx;
    if (jf_get(&b, body, "prompt", JF_STRING, NULL, &prompt) < 0 || jf_get(&b, body, "system", JF_STRING, NULL, &system) < 0 ||
        jf_get(&b, body, "raw", JF_BOOL, NULL, &raw) < 0 || jf_get(&b, body, "suffix", JF_STRING, NULL, &suffix) < 0)
        return ERR_INVALID;
    if (suffix && json_string_length(suffix)) return jf_fail(&b, "suffix", "(fill-in-the-middle) is not supported by this server");
    if (jf_get(&b, body, "template", JF_STRING, NULL, &tmpl) < 0) return ERR_INVALID;
    if (tmpl && json_string_length(tmpl))
        return jf_fail(&b, "template", "(a Go template) is not supported: the model's chat template is used, or raw");
    if (jf_get(&b, body, "context", JF_ARRAY, NULL, &ctx) < 0) return ERR_INVALID;
    if (json_array_size(ctx)) return jf_fail(&b, "context", "is not supported: send the history with /api/chat");
    if (check_images(&b, body) < 0) return ERR_INVALID;
    if (!prompt || json_string_length(prompt) == 0) return 0;
    if (raw && json_is_true(raw)) {
        *kind = OAI_COMPLETION;
        json_object_set(oai, "prompt", prompt);
        /* completions take the number of alternatives as "logprobs" */
        if (want_lp) json_object_set_new(oai, "logprobs", top ? json_incref(top) : json_integer(0));
        return 1;
    }
    if (want_lp) {
        json_object_set_new(oai, "logprobs", json_true());
        if (top) json_object_set(oai, "top_logprobs", top);
    }
    json_t *msgs = json_array();
    if (system && json_string_length(system))
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", prompt));
    json_object_set_new(oai, "messages", msgs);
    return map_think(rc, &b, body, oai) < 0 ? ERR_INVALID : 1;
}

int api_ollama_params(routes_ctx *rc, json_t *body, bool chat, oai_params *p, oai_kind *kind, bool *stream,
                      oai_error *err) {
    unsigned long f0 = oai_json_nomem();
    json_t *oai = json_object();
    int t = oai ? translate(rc, body, chat, oai, kind, err) : -1;
    *stream = json_is_true(json_object_get(oai, "stream"));
    if (t < 0 || oai_json_nomem() != f0) { /* out of memory is the server's state, not the client's mistake */
        if (oai_json_nomem() != f0 || !oai) {
            memset(err, 0, sizeof *err);
            err->status = 503;
            err_set(&err->e, ERR_NOMEM, "out of memory reading the request");
        }
        json_decref(oai);
        return -1;
    }
    if (t == 0) {
        json_decref(oai);
        return 0;
    }
    int rc_ = oai_parse(oai, *kind, tok_n_vocab(rc->tok), p, err);
    json_decref(oai);
    if (rc_ < 0) return -1;
    *stream = p->stream;
    return 1;
}

static int out_parse(api_answer *a, http_exchange *x, json_t *body, oai_params *p, oai_error *err) {
    bool chat = !strcmp(http_path(x), "/api/chat");
    const char *model = check_model(a->rc, x, body);
    if (!model) return 0; /* answered */
    olla_out *o = xcalloc(1, sizeof *o);
    a->ctx = o;
    o->chat = chat;
    snprintf(o->model, sizeof o->model, "%s", model);
    bool stream;
    int t = api_ollama_params(a->rc, body, chat, p, &o->kind, &stream, err);
    if (t == 0) answer_load(x, chat, o->model, stream);
    return t;
}

static void out_start(api_answer *a, const oai_params *p) {
    olla_out *o = a->ctx;
    o->logprobs = p->n_logprobs >= 0;
    o->lp = json_array();
}

/* Ollama's field names are the internal ones in messages; an error names
 * its field before the message ("options.temperature: ..."). Its answer is
 * NDJSON lines: a stream's after each poll that produced text, then the
 * last with the complete calls and the counts. */
const api_ops api_ollama_api = {
    .name = "ollama",
    .param = param_name,
    .error_json = error_json,
    .param_in_message = true,
    .parse = out_parse,
    .start = out_start,
    .poll = out_poll,
    .open = out_open,
    .delta = out_delta,
    .close = out_close,
    .polled = out_polled,
    .finish = out_finish,
    .fail = out_fail,
    .free_ctx = out_free,
    .empty = API_EMPTY_NONE,
    .framing = API_NDJSON,
    .stream_type = "application/x-ndjson",
    .stream_nomem = "{\"error\":\"" API_NOMEM_MSG "\"}\n",
};

void api_ollama_version(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    static const char v[] = "{\"version\":\"" OLLAMA_VERSION "\"}";
    http_reply(x, 200, "application/json", v, strlen(v), NULL, NULL);
}

void api_ollama_unsupported(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    /* Decision: 501 with what to do instead; kvloom has no model registry
     * to pull from, its models are GGUF files on disk */
    reply_error(x, 501,
                "%s is not supported: kvloom loads models from GGUF files on disk, it does not download or "
                "manage them (start it with 'kvloom serve -m FILE.gguf'; /api/tags lists what it serves)",
                http_path(x));
}
