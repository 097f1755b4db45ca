/*
 * routes.c — the routes (see routes.h, server.h, docs/server.md).
 *
 * A generation request of any API goes through api_serve (api.h):
 *   body ─json─▶ the API's parse (oai_parse) ─▶ gen_start (generate.h:
 *   prompt, constraint, engine) ─▶ the answer from gen_poll's events,
 *   through the API's callbacks (oai_answer.c for OpenAI's chat and
 *   completions: the JSON answer or the SSE chunks) ─▶ usage.
 *
 * Every failure before submission is a 4xx with the OpenAI error object; after
 * submission the only errors are the engine's (500) or the client going away
 * (the request is cancelled and the status logged as 499). Every request is
 * answered exactly once and logged in one line.
 */
#include "routes.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../chat/toolcall.h"
#include "../kern/kern.h"
#include "../sched/req.h"
#include "api.h"
#include "apis.h"
#include "embed.h"
#include "procmem.h"
#include "models.h"
#include "generate.h"
#include "jfield.h"
#include "oai.h"
#include "server.h"
#include "stop.h"
#include "webui.h"
#include "../chat/chat.h"

/* A ChatML template in Jinja: what the server renders with when the model
 * has no template it can run (chat/chat.h's fallback). */
static const char chatml_template[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

char *routes_template_source(const routes_ctx *rc) {
    if (chat_tmpl_fallback_reason(rc->chat)) return xstrdup(chatml_template);
    if (rc->o->chat_template_file) {
        char *file = NULL;
        size_t n;
        err_t e = {0};
        if (file_read_all(rc->o->chat_template_file, &file, &n, &e) == 0) return file;
    }
    const char *t = tok_chat_template(rc->tok);
    return xstrdup(t ? t : "");
}

/* ---- other routes (the generation routes: api_serve, api.h) ---- */

/* GET /v1/models (id NULL) or /v1/models/{id}. */
static void handle_models(routes_ctx *rc, http_exchange *x, const char *id) {
    if (id && strcmp(id, rc->model_id) != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.256s'", id, rc->model_id);
        oai_reply_error(x, 404, msg, "model", "model_not_found");
        return;
    }
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:{s:i, s:i, s:I}}", "id", rc->model_id, "object", "model", "created",
                          (json_int_t)rc->created, "owned_by", "kvloom", "meta", "n_vocab", rc->m->cfg.n_vocab, "n_ctx",
                          embed_n_ctx(rc), "weight_bytes", (json_int_t)rc->m->weight_bytes);
    json_t *o = id ? m : json_pack("{s:s, s:[o]}", "object", "list", "data", m);
    api_reply_json(&api_openai, x, o);
    json_decref(o);
}

/* The listings of several models (models.h): GET /v1/models (what NULL),
 * /v1/models/{id} (what = the id), Ollama's /api/tags and /api/ps. */
static void handle_model_list(routes_ctx *root, http_exchange *x, const char *what) {
    bool tags = what && !strcmp(what, "/api/tags"), ps = what && !strcmp(what, "/api/ps");
    json_t *o = models_list_json(root->models, tags ? MODELS_OLLAMA_TAGS : ps ? MODELS_OLLAMA_PS : MODELS_OPENAI);
    if (what && !tags && !ps) { /* one model by id */
        json_t *data = json_object_get(o, "data"), *hit = NULL, *v;
        size_t i;
        json_array_foreach(data, i, v) if (!strcmp(json_string_value(json_object_get(v, "id")), what)) hit = v;
        if (!hit) {
            char msg[600];
            snprintf(msg, sizeof msg, "the model '%.200s' does not exist (GET /v1/models lists them)", what);
            oai_reply_error(x, 404, msg, "model", "model_not_found");
            json_decref(o);
            return;
        }
        json_incref(hit);
        json_decref(o);
        o = hit;
    }
    api_reply_json(&api_openai, x, o);
    json_decref(o);
}

/* The engine statistics /metrics and /load report: ?model=NAME's, else
 * every loaded model's (models_stats). NULL when it answered a 404 (an
 * unknown name); *n how many, *names NULL when one model is served (no
 * labels). */
static engine_stats *route_stats(routes_ctx *root, http_exchange *x, const char ***names, int *n) {
    const char *want = models_count(root->models) > 1 ? http_query(x, "model") : NULL;
    engine_stats *st = xcalloc(MODELS_MAX, sizeof *st);
    *names = xcalloc(MODELS_MAX, sizeof **names);
    *n = models_stats(root->models, want, st, *names, MODELS_MAX);
    if (*n < 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist (GET /v1/models lists them)", want);
        oai_reply_error(x, 404, msg, "model", "model_not_found");
        free(st);
        free(*names);
        return NULL;
    }
    if (models_count(root->models) == 1) {
        free(*names);
        *names = NULL;
    }
    return st;
}

/* GET /metrics[?model=NAME]: with several models served, each engine metric
 * has one sample per loaded model, labelled model="NAME" (models.h). */
static void r_metrics(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    const char **names;
    int n;
    engine_stats *st = route_stats(root, x, &names, &n);
    if (!st) return;
    sbuf b = {0};
    metrics_render(rc->met, st, names, n, &b);
    uint64_t accounted = 0, mapped = 0; /* mapped: of accounted, the model files (not the allocator's) */
    for (int i = 0; i < n; i++) {
        accounted += st[i].mem_weights + st[i].mem_kv_pool + st[i].mem_requests + st[i].mem_grammar_caches +
                     st[i].mem_grammar_idle + st[i].mem_kv_disk + st[i].mem_scratch + st[i].mem_tables;
        mapped += st[i].mem_weights + st[i].mem_model_meta;
    }
    free(st);
    free(names);
    http_stats hs;
    http_get_stats(x, &hs);
    sbuf_printf(&b,
                    "# HELP kvloom_http_body_bytes Request body bytes held now (bounded by --max-body-total).\n"
                    "# TYPE kvloom_http_body_bytes gauge\nkvloom_http_body_bytes %zu\n"
                    "# HELP kvloom_http_deadline_closed_total Connections closed past their header, body or "
                    "keep-alive deadline.\n"
                    "# TYPE kvloom_http_deadline_closed_total counter\nkvloom_http_deadline_closed_total %llu\n"
                    "# HELP kvloom_http_connections Open HTTP connections.\n"
                    "# TYPE kvloom_http_connections gauge\nkvloom_http_connections %d\n"
                    "# HELP kvloom_http_stream_bytes Streams' output buffers now (produced, not yet sent).\n"
                    "# TYPE kvloom_http_stream_bytes gauge\nkvloom_http_stream_bytes %zu\n"
                    "# HELP kvloom_http_culled_total Idle connections closed to make room for new ones "
                    "(--max-connections).\n"
                    "# TYPE kvloom_http_culled_total counter\nkvloom_http_culled_total %llu\n"
                    "# HELP kvloom_http_refused_total New connections closed at once (--max-conns-per-ip, or every "
                    "slot in a request).\n"
                    "# TYPE kvloom_http_refused_total counter\nkvloom_http_refused_total %llu\n"
                    "# HELP kvloom_http_window_idle_total Streams stopped (their requests parked) because their "
                    "client's receive window showed it read nothing for --park-timeout.\n"
                    "# TYPE kvloom_http_window_idle_total counter\nkvloom_http_window_idle_total %llu\n",
                    hs.body_bytes, hs.n_deadline_closed, hs.n_connections, hs.stream_bytes, hs.n_culled, hs.n_refused,
                    hs.n_window_idle);
    int n_stored;
    size_t stored_bytes;
    resp_store_stats(rc->responses, &n_stored, &stored_bytes);
    sbuf_printf(&b,
                    "# HELP kvloom_responses_stored Responses kept for previous_response_id and GET.\n"
                    "# TYPE kvloom_responses_stored gauge\nkvloom_responses_stored %d\n"
                    "# HELP kvloom_responses_stored_bytes Their bytes (text and conversation; bounded).\n"
                    "# TYPE kvloom_responses_stored_bytes gauge\nkvloom_responses_stored_bytes %zu\n",
                    n_stored, stored_bytes);
    /* the process's own part, and the budget (docs/server.md, "Memory
     * budget"): what is held now, with the HTTP side's transient parts at
     * their bounds and each thread at its allowance */
    procmem pm;
    procmem_read(&pm);
    const uint64_t tls = procmem_tls_bytes();
    /* the allocator's bytes in use that no part names: the prefix tree,
     * connections, JSON being parsed, libraries' own */
    const uint64_t named = accounted - mapped + hs.body_bytes + hs.stream_bytes + stored_bytes;
    const uint64_t heap_other = pm.heap_used > named ? pm.heap_used - named : 0;
    /* the compute threads' kernel buffers (anonymous mappings of their own) */
    const uint64_t kbuf = kern_thread_buffer_bytes();
    const uint64_t runtime = pm.program + pm.stacks + kbuf + pm.heap_free + heap_other;
    const uint64_t held = accounted + stored_bytes;
    /* handler threads exit when idle: the budget counts the most there were */
    const int threads_peak = pm.threads - hs.n_workers + hs.n_workers_peak;
    const uint64_t budget = held + hs.max_body_total +
                            (uint64_t)hs.max_connections * (HTTP_STREAM_BUFFER + HTTP_CONN_MEMORY) + pm.program + kbuf +
                            (uint64_t)threads_peak * (tls + MEM_STACK_ALLOWANCE) + pm.heap_free + MEM_HEAP_SLACK;
    sbuf_printf(&b,
                    "# HELP kvloom_process_memory_bytes The process's own memory: program (resident code and "
                    "libraries), stacks (threads' stacks and thread-local blocks), kernel_buffers (the compute "
                    "threads' per-thread kernel buffers), heap_free (free bytes the "
                    "allocator holds), heap_other (bytes it handed out that no other part names).\n"
                    "# TYPE kvloom_process_memory_bytes gauge\n"
                    "kvloom_process_memory_bytes{part=\"program\"} %llu\n"
                    "kvloom_process_memory_bytes{part=\"stacks\"} %llu\n"
                    "kvloom_process_memory_bytes{part=\"kernel_buffers\"} %llu\n"
                    "kvloom_process_memory_bytes{part=\"heap_free\"} %llu\n"
                    "kvloom_process_memory_bytes{part=\"heap_other\"} %llu\n"
                    "# HELP kvloom_process_threads Threads of the process (each holds a %llu-byte thread-local "
                    "block).\n"
                    "# TYPE kvloom_process_threads gauge\nkvloom_process_threads %d\n"
                    "# HELP kvloom_process_resident_bytes The resident set (VmRSS).\n"
                    "# TYPE kvloom_process_resident_bytes gauge\nkvloom_process_resident_bytes %llu\n"
                    "# HELP kvloom_process_resident_peak_bytes The resident set's peak (VmHWM).\n"
                    "# TYPE kvloom_process_resident_peak_bytes gauge\nkvloom_process_resident_peak_bytes %llu\n",
                    (unsigned long long)pm.program, (unsigned long long)pm.stacks, (unsigned long long)kbuf,
                    (unsigned long long)pm.heap_free,
                    (unsigned long long)heap_other, (unsigned long long)tls, pm.threads, (unsigned long long)pm.rss, (unsigned long long)pm.peak_rss);
    sbuf_printf(&b,
                    "# HELP kvloom_memory_accounted_bytes kvloom_memory_bytes of every loaded model, request bodies "
                    "held, stream buffers, stored responses and kvloom_process_memory_bytes, together (the "
                    "resident set is at most this, but for the allocator's bookkeeping and what libraries "
                    "allocate unseen).\n"
                    "# TYPE kvloom_memory_accounted_bytes gauge\nkvloom_memory_accounted_bytes %llu\n"
                    "# HELP kvloom_memory_budget_bytes The bound of the resident set: what is held now (models, "
                    "requests, grammars, stored responses), bodies at --max-body-total, every connection with a "
                    "full stream buffer, each thread's stack allowance, the program, the allocator's free bytes "
                    "and slack (docs/server.md, \"Memory budget\").\n"
                    "# TYPE kvloom_memory_budget_bytes gauge\nkvloom_memory_budget_bytes %llu\n",
                    (unsigned long long)(held + hs.body_bytes + hs.stream_bytes + runtime),
                    (unsigned long long)budget);
    http_reply(x, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.n, NULL, NULL);
    sbuf_free(&b);
}

/* GET /load: what a load balancer polls (deploy/haproxy/kvloom.lua) between
 * health checks, small and without the API key like /health. */
/* With several models: ?model=NAME's numbers, else the sums over the
 * loaded models (kv_usage: the fullest pool's, since a request lands in
 * one), and "models": each loaded model's own. */
static void r_load(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    const char **names;
    int n;
    engine_stats *st = route_stats(root, x, &names, &n);
    if (!st) return;
    int running = 0, waiting = 0;
    double kv = 0;
    sbuf per = {0};
    for (int i = 0; i < n; i++) {
        running += st[i].n_running;
        waiting += st[i].n_waiting;
        kv = MAX(kv, metrics_kv_usage(&st[i]));
        if (names) { /* names: file names or --alias, JSON-escaped by jansson */
            json_t *k = json_string(names[i]);
            char *ks = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
            sbuf_printf(&per, "%s%s:{\"running\":%d,\"waiting\":%d,\"kv_usage\":%.4f}", per.n ? "," : "",
                            ks ? ks : "\"?\"", st[i].n_running, st[i].n_waiting, metrics_kv_usage(&st[i]));
            free(ks);
            json_decref(k);
        }
    }
    /* requests still in their handler, not yet in an engine's counts: a
     * balancer (or an operator about to stop this replica) reading 0 and 0
     * must mean that nothing is on its way in (deploy_test kills a replica
     * it reads idle; a request between its body and the engine's queue
     * failed there). For a moment after the hand-over one is counted twice. */
    waiting += atomic_load(&root->n_pending); /* every model's: the handler runs before the model is known to /load */
    sbuf b = {0};
    sbuf_printf(&b, "{\"running\":%d,\"waiting\":%d,\"kv_usage\":%.4f,\"ttft_recent_s\":%.6f", running, waiting,
                    kv, metrics_ttft_recent(root->met));
    if (names) sbuf_printf(&b, ",\"models\":{%s}", per.p ? per.p : "");
    sbuf_printf(&b, "}");
    http_reply(x, 200, "application/json", b.p, b.n, NULL, NULL);
    sbuf_free(&b);
    sbuf_free(&per);
    free(st);
    free(names);
}

static void r_tokenize(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    json_t *body = api_body_json(&api_openai, x);
    if (!body) return;
    json_t *c = json_object_get(body, "content");
    const char *param = "content";
    if (!c) c = json_object_get(body, "prompt"), param = "prompt";
    json_t *as = json_object_get(body, "add_special");
    json_t *wp = json_object_get(body, "with_pieces");
    if (!json_is_string(c)) {
        oai_reply_error(x, 400, "'content' must be a string", param, NULL);
    } else if (as && !json_is_boolean(as)) {
        oai_reply_error(x, 400, "'add_special' must be a boolean", "add_special", NULL);
    } else if (wp && !json_is_boolean(wp)) {
        oai_reply_error(x, 400, "'with_pieces' must be a boolean", "with_pieces", NULL);
    } else {
        bool add = as ? json_is_true(as) : true;
        err_t e = {0};
        int n = 0;
        int32_t *ids = gen_encode(rc->tok, json_string_value(c), json_string_length(c), add && tok_add_bos(rc->tok), &n, &e);
        /* the answer grows with the text (with pieces, ~100 bytes of JSON
         * values per token): bounded like /detokenize's input */
        size_t max_n = (size_t)MAX(embed_n_ctx(rc), ROUTES_MAX_DETOKENIZE); /* no engine: an encoder */
        if (!ids) {
            bool nomem = e.code == ERR_NOMEM;
            oai_reply_error(x, nomem ? 503 : 400, e.msg, nomem ? NULL : param, NULL);
        } else if ((size_t)n > max_n) {
            char msg[200];
            snprintf(msg, sizeof msg, "'%s' is %d tokens, more than the limit of %zu", param, n, max_n);
            oai_reply_error(x, 400, msg, param, NULL);
            free(ids);
        } else {
            json_t *arr = json_array();
            for (int i = 0; i < n; i++) {
                if (wp && json_is_true(wp))
                    json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece",
                                                         gen_piece_json(rc->tok, ids[i], NULL)));
                else
                    json_array_append_new(arr, json_integer(ids[i]));
            }
            json_t *o = json_pack("{s:o}", "tokens", arr);
            api_reply_json(&api_openai, x, o);
            json_decref(o);
            free(ids);
        }
    }
    json_decref(body);
}

static void r_detokenize(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    json_t *body = api_body_json(&api_openai, x);
    if (!body) return;
    static const jf_style names = {.quote = JF_QUOTED, .params = true};
    oai_error err;
    jf b = jf_body(&names, &err), tw = jf_key(&b, "tokens");
    json_t *t;
    int32_t *ids = NULL;
    size_t n = 0, max_n = (size_t)MAX(embed_n_ctx(rc), ROUTES_MAX_DETOKENIZE);
    if (jf_get(&b, body, "tokens", JF_ARRAY | JF_REQUIRED, "an array of token ids", &t) < 0 ||
        ((n = json_array_size(t)) > max_n && jf_fail(&tw, NULL, "holds %zu ids, more than the limit of %zu", n, max_n) < 0) ||
        ((ids = malloc((n ? n : 1) * sizeof *ids)) && jf_token_ids(&tw, t, tok_n_vocab(rc->tok), ids) < 0)) {
        api_reply_refusal(&api_openai, x, &err);
        free(ids);
        json_decref(body);
        return;
    }
    if (!ids) {
        oai_reply_error(x, 503, "out of memory", NULL, NULL);
        json_decref(body);
        return;
    }
    int need = tok_decode(rc->tok, ids, (int)n, true, NULL, 0);
    if (need >= 0 && (size_t)need > rc->o->max_body_bytes) {
        char msg[160];
        snprintf(msg, sizeof msg, "the decoded text would be %d bytes, more than the limit of %zu (--max-body)", need,
                 rc->o->max_body_bytes);
        oai_reply_error(x, 400, msg, "tokens", NULL);
        free(ids);
        json_decref(body);
        return;
    }
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (text) tok_decode(rc->tok, ids, (int)n, true, text, need + 1);
    if (!text && need >= 0) {
        oai_reply_error(x, 503, "out of memory decoding the tokens", NULL, NULL);
    } else if (!text) {
        oai_reply_error(x, 400, "the tokens cannot be decoded", "tokens", NULL);
    } else {
        json_t *s = json_stringn(text, (size_t)need);
        json_t *o = json_pack("{s:o}", "content", s ? s : json_string(""));
        api_reply_json(&api_openai, x, o);
        json_decref(o);
    }
    free(text);
    free(ids);
    json_decref(body);
}

/* GET /props: llama-server's shape (its web UI and tools read it), with
 * kvloom's values; "version" added. */
static void r_props(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    sampler_params sp = sampler_defaults();
    json_t *params = json_pack("{s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:[], s:b}", "n_predict", -1, "seed",
                               (json_int_t)-1, "temperature", sp.temperature, "top_k", sp.top_k, "top_p", sp.top_p,
                               "min_p", sp.min_p, "repeat_penalty", sp.repeat_penalty, "repeat_last_n",
                               sp.repeat_last_n, "presence_penalty", sp.presence_penalty, "frequency_penalty",
                               sp.frequency_penalty, "stop", "ignore_eos", 0);
    char *tmpl = routes_template_source(rc);
    const char *bos = tok_bos(rc->tok) >= 0 ? tok_piece_str(rc->tok, tok_bos(rc->tok)) : NULL;
    const char *eos = tok_eos(rc->tok) >= 0 ? tok_piece_str(rc->tok, tok_eos(rc->tok)) : NULL;
    json_t *o = json_pack("{s:{s:o, s:i}, s:i, s:s, s:s, s:{s:b, s:b}, s:b, s:b, s:b, s:b, s:s, s:o, s:o, s:s, "
                          "s:s, s:b}",
                          "default_generation_settings", "params", params, "n_ctx", embed_n_ctx(rc),
                          "total_slots", rc->o->max_running, "model_alias", rc->model_id, "model_path",
                          rc->model_path ? rc->model_path : SERVER_DEFAULT_MODEL, "modalities", "vision", 0,
                          "audio", 0, "endpoint_slots", 0, "endpoint_props", 1, "endpoint_metrics", 1, "webui",
                          !rc->o->no_webui, "chat_template", tmpl, "bos_token", oai_text_json(bos ? bos : "", bos ? strlen(bos) : 0),
                          "eos_token", oai_text_json(eos ? eos : "", eos ? strlen(eos) : 0), "build_info",
                          "kvloom " KVLOOM_VERSION, "version", KVLOOM_VERSION, "is_sleeping", 0);
    free(tmpl);
    /* llama-server's names: whether the template writes assistant calls
     * (without, kvloom explains the calls in a system message), and whether
     * an answer may hold several (not when the template refuses them) */
    if (o) json_object_set_new(o, "chat_template_caps",
                               json_pack("{s:b, s:b}", "supports_tool_calls", rc->template_calls,
                                         "supports_parallel_tool_calls", !rc->one_call));
    api_reply_json(&api_openai, x, o);
    json_decref(o);
}

/* ---- dispatch ---- */

/* Constant-time comparison of one presented key with the server's. */
static bool key_equal(const char *want, const char *got) {
    while (*got == ' ') got++;
    size_t a = strlen(want), b = strlen(got);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < b ? got[i] : 0);
    return diff == 0;
}

/* The key: "Authorization: Bearer KEY", or Anthropic clients'
 * "x-api-key: KEY". Decision: the request is authenticated when either
 * header carries a key, so a wrong x-api-key (an SDK's placeholder) does
 * not override a valid Bearer token, nor the other way round; every key is
 * compared with both, in constant time, so the timing tells neither which
 * header nor which key matched. When both carry different valid keys, the
 * Bearer one is the identity. A wrong key in both is a 401. */
int routes_key_index(const routes_ctx *rc, http_exchange *x) {
    const server_opts *o = rc->o;
    if (!o->n_api_keys) return ROUTES_NO_KEYS;
    const char *auth = http_header(x, "Authorization"), *x_api_key = http_header(x, "x-api-key");
    const char *bearer = auth && !strncasecmp(auth, "Bearer ", 7) ? auth + 7 : NULL;
    int by_bearer = ROUTES_BAD_KEY, by_x = ROUTES_BAD_KEY;
    for (int i = 0; i < o->n_api_keys; i++) {
        bool b = bearer && key_equal(o->api_keys[i], bearer);
        bool k = x_api_key && key_equal(o->api_keys[i], x_api_key);
        by_bearer = b ? i : by_bearer;
        by_x = k ? i : by_x;
    }
    return by_bearer != ROUTES_BAD_KEY ? by_bearer : by_x;
}

uint64_t routes_client_id(const routes_ctx *rc, http_exchange *x, const char *user) {
    int k = routes_key_index(rc, x);
    if (k >= 0) return hash_bytes(rc->o->api_keys[k], strlen(rc->o->api_keys[k]), 0x6b6579ull) | 1;
    if (user && *user) return hash_bytes(user, strlen(user), 0x75736572ull) | 1;
    unsigned char a[16];
    http_peer_key(x, a);
    return hash_bytes(a, sizeof a, 0x61646472ull) | 1;
}

int routes_priority(const routes_ctx *rc, http_exchange *x, int requested) {
    int k = routes_key_index(rc, x);
    return k >= 0 ? MAX(requested, rc->o->api_key_priority[k]) : requested;
}

uint64_t routes_cache_salt(const routes_ctx *rc, http_exchange *x, const char *cache_salt) {
    int k = routes_key_index(rc, x);
    uint64_t s = k >= 0 ? hash_bytes(rc->o->api_keys[k], strlen(rc->o->api_keys[k]), 0x73616c74ull) : 0;
    if (cache_salt && *cache_salt) s = hash_bytes(cache_salt, strlen(cache_salt), s ^ 0x63736c74ull);
    return s;
}

/* The "model" of a POST body (Ollama also "name"), copied to buf; NULL
 * when the body is not JSON or names none (the handler reports that). */
static const char *body_model(http_exchange *x, char *buf, size_t cap) {
    size_t n;
    const char *b = http_body(x, &n);
    json_t *o = b && n ? json_loadb(b, n, 0, NULL) : NULL;
    json_t *m = json_is_object(o) ? json_object_get(o, "model") : NULL;
    if (!json_is_string(m) && json_is_object(o)) m = json_object_get(o, "name");
    const char *r = NULL;
    if (json_is_string(m)) {
        snprintf(buf, cap, "%s", json_string_value(m));
        r = buf;
    }
    json_decref(o);
    return r;
}

/* POST /models/load and /models/unload {"model": NAME}. */
static void r_models_load(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    bool load = !strcmp(rt->path, "/models/load");
    char name[300], msg[700];
    const char *want = body_model(x, name, sizeof name);
    if (!want) {
        oai_reply_error(x, 400, "'model' (a string) is required", "model", NULL);
        return;
    }
    int st = 0;
    int r = load ? models_load(root->models, want, &st, msg, sizeof msg)
                 : models_unload(root->models, want, &st, msg, sizeof msg);
    if (r < 0) oai_reply_error(x, st, msg, "model", st == 404 ? "model_not_found" : NULL);
    else http_reply(x, 200, "application/json", "{\"success\":true}", 16, NULL, NULL);
}

/* Route flags (route.flags). */
#define RF_PREFIX 1u  /* path is a prefix, an id follows (GET /v1/models/{id})       */
#define RF_EXEMPT 2u  /* no API key, and no body (routes_precheck): what a balancer polls */
#define RF_ROOT 4u    /* of no model: listings, load and unload, Ollama's refusals     */
#define RF_LIST 8u    /* a listing of the models: the root's when several are served  */
#define RF_NAMED 16u  /* one model's answer: with several served the request names it */
#define RF_GEN 32u    /* a generation (api_serve): counted in n_pending (/load)      */
#define RF_POLL 64u   /* its 200s are debug log lines (balancers poll it)             */

/* GET /v1/models (the listing) or /v1/models/{id}. */
static void r_models(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    const char *id = rt->flags & RF_PREFIX ? http_path(x) + strlen(rt->path) : NULL;
    if (rc == root) handle_model_list(root, x, id);
    else handle_models(rc, x, id);
}
static void r_health(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    static const char ok[] = "{\"status\":\"ok\",\"version\":\"" KVLOOM_VERSION "\"}";
    http_reply(x, 200, "application/json", ok, sizeof ok - 1, NULL, NULL);
}
/* GET /api/tags: one model's (api_ollama.c), or the listing of several;
 * GET /api/ps (a root route): the listing. */
static void r_ollama_tags(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x) {
    if (rc == root) handle_model_list(root, x, rt->path);
    else api_ollama_tags(rc, x);
}

/* The path a generation route logs: OpenAI's are served without /v1 too. */
static const char *gen_path(const route *rt) {
    if (!strcmp(rt->path, "/completions")) return "/v1/completions";
    return !strcmp(rt->path, "/chat/completions") ? "/v1/chat/completions" : rt->path;
}

static const route routes[] = {
    {"POST", "/v1/completions", NULL, &api_openai, RF_GEN},
    {"POST", "/completions", NULL, &api_openai, RF_GEN},
    {"POST", "/v1/chat/completions", NULL, &api_openai, RF_GEN},
    {"POST", "/chat/completions", NULL, &api_openai, RF_GEN},
    {"GET", "/v1/models", r_models, &api_openai, RF_LIST},
    {"GET", "/models", r_models, &api_openai, RF_LIST},
    {"GET", "/v1/models/", r_models, &api_openai, RF_LIST | RF_PREFIX},
    {"GET", "/models/", r_models, &api_openai, RF_LIST | RF_PREFIX},
    {"GET", "/health", r_health, &api_openai, RF_ROOT | RF_EXEMPT | RF_POLL},
    {"GET", "/metrics", r_metrics, &api_openai, RF_ROOT}, /* per model, never loading one (route_stats) */
    {"GET", "/load", r_load, &api_openai, RF_ROOT | RF_EXEMPT | RF_POLL},
    {"GET", "/props", r_props, &api_openai, RF_NAMED},
    {"POST", "/tokenize", r_tokenize, &api_openai, RF_NAMED},
    {"POST", "/detokenize", r_detokenize, &api_openai, RF_NAMED},
    {"POST", "/v1/embeddings", embed_openai, &api_openai, 0},
    {"POST", "/embeddings", embed_openai, &api_openai, 0},
    {"POST", "/models/load", r_models_load, &api_openai, RF_ROOT},
    {"POST", "/models/unload", r_models_load, &api_openai, RF_ROOT},
    {"POST", "/v1/messages", NULL, &api_anthropic, RF_GEN},
    {"POST", "/v1/messages/count_tokens", api_anthropic_count_tokens, &api_anthropic, 0},
    {"POST", "/v1/responses", NULL, &api_responses, RF_GEN},
    {"GET", "/v1/responses/", api_responses_item, &api_responses, RF_PREFIX},
    {"DELETE", "/v1/responses/", api_responses_item, &api_responses, RF_PREFIX},
    {"POST", "/api/chat", NULL, &api_ollama_api, RF_GEN},
    {"POST", "/api/generate", NULL, &api_ollama_api, RF_GEN},
    {"GET", "/api/tags", r_ollama_tags, &api_ollama_api, RF_LIST},
    {"GET", "/api/ps", r_ollama_tags, &api_ollama_api, RF_ROOT},
    {"POST", "/api/show", api_ollama_show, &api_ollama_api, 0},
    {"GET", "/api/version", api_ollama_version, &api_ollama_api, RF_ROOT},
    {"POST", "/api/embed", embed_ollama, &api_ollama_api, 0},
    {"POST", "/api/embeddings", embed_ollama, &api_ollama_api, 0},
    /* model management: refused with a message (models are files here) */
    {"POST", "/api/pull", api_ollama_unsupported, &api_ollama_api, RF_ROOT},
    {"POST", "/api/push", api_ollama_unsupported, &api_ollama_api, RF_ROOT},
    {"POST", "/api/create", api_ollama_unsupported, &api_ollama_api, RF_ROOT},
    {"POST", "/api/copy", api_ollama_unsupported, &api_ollama_api, RF_ROOT},
    {"DELETE", "/api/delete", api_ollama_unsupported, &api_ollama_api, RF_ROOT},
};

static bool method_fits(const route *r, const char *method) {
    return !strcmp(r->method, method) || (!strcmp(method, "HEAD") && !strcmp(r->method, "GET"));
}

static bool path_fits(const route *r, const char *path) {
    size_t k = strlen(r->path);
    return r->flags & RF_PREFIX ? !strncmp(path, r->path, k) && path[k] : !strcmp(path, r->path);
}

/* The route for method + path (NULL if none); *path_known when some method
 * is served on the path; *allow (if not NULL) gets the methods that are,
 * for a 405's Allow header. */
static const route *route_find(const char *method, const char *path, bool *path_known, char *allow, size_t cap) {
    const route *rt = NULL;
    *path_known = false;
    if (allow) snprintf(allow, cap, "OPTIONS");
    /* the exact paths first: POST /models/load is not GET /models/{id} */
    for (unsigned pass = 0; pass < 2 && !*path_known; pass++) {
        for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
            const route *v = &routes[i];
            if ((v->flags & RF_PREFIX) != (pass ? RF_PREFIX : 0u) || !path_fits(v, path)) continue;
            *path_known = true;
            if (!rt && method_fits(v, method)) rt = v;
            if (allow && !strstr(allow, v->method)) {
                size_t k = strlen(allow);
                snprintf(allow + k, cap - k, ", %s%s", v->method, strcmp(v->method, "GET") ? "" : ", HEAD");
            }
        }
    }
    return rt;
}

/* The API of a path (its errors' shape): its route's, else by its prefix
 * (api_of_path: a 404 under /api/ is Ollama's). */
static const api_ops *path_api(const char *path) {
    for (unsigned pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < ARRAY_LEN(routes); i++)
            if ((routes[i].flags & RF_PREFIX) == (pass ? RF_PREFIX : 0u) && path_fits(&routes[i], path))
                return routes[i].ops;
    return api_of_path(path);
}

/* Whether `host` (a Host header: name or [v6], maybe a port) names this
 * server for a browser: localhost and its subdomains, a loopback or the
 * bound address, or an --allowed-hosts entry ("*" allows any). */
static bool host_allowed(const server_opts *o, const char *host) {
    char name[256];
    size_t k;
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        k = end ? (size_t)(end - host - 1) : strlen(host + 1);
        host++;
    } else {
        const char *colon = strrchr(host, ':');
        k = colon && colon == strchr(host, ':') ? (size_t)(colon - host) : strlen(host);
    }
    if (k == 0 || k >= sizeof name) return false;
    for (size_t i = 0; i < k; i++) name[i] = (char)tolower((unsigned char)host[i]);
    name[k] = 0;
    if (name[k - 1] == '.') name[--k] = 0;
    if (!strcmp(name, "localhost") || (k > 10 && !strcmp(name + k - 10, ".localhost"))) return true;
    if (server_host_is_loopback(name)) return true;
    if (o->host && !strcasecmp(name, o->host)) return true;
    for (const char *p = o->allowed_hosts; p && *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ",");
        size_t len = n;
        while (len && p[len - 1] == ' ') len--;
        if ((len == 1 && p[0] == '*') || (len && len == k && !strncasecmp(p, name, k))) return true;
        p += n;
    }
    return false;
}

/* A media type that a cross-site HTML form (or a no-preflight fetch) can
 * send: refused on the JSON routes (415). */
static bool form_content_type(const char *ct) {
    static const char *const forms[] = {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"};
    if (!ct) return false;
    while (*ct == ' ') ct++;
    size_t k = strcspn(ct, "; \t");
    for (size_t i = 0; i < ARRAY_LEN(forms); i++)
        if (k == strlen(forms[i]) && !strncasecmp(ct, forms[i], k)) return true;
    return false;
}

/* An error answered in the shape of the path's API (code: OpenAI's). */
static void reply_error_shaped(http_exchange *x, int status, const char *msg, const char *code) {
    api_reply_error(path_api(http_path(x)), x, status, msg, NULL, code);
}

size_t routes_error_body(const char *path, int status, const char *code, const char *msg, char *out, size_t cap) {
    char *s = path_api(path)->error_json(status, msg, NULL, code);
    size_t n = strlen(s);
    if (n >= cap) n = 0; /* the HTTP layer's own OpenAI object */
    else memcpy(out, s, n + 1);
    free(s);
    return n;
}

/* Answers a refusal in the API's shape, counts and logs it. */
static void refuse(routes_ctx *rc, http_exchange *x, int status, const char *msg, const char *code) {
    reply_error_shaped(x, status, msg, code);
    metrics_count(rc->met, status);
    log_info("%s %s %d (%s: %s)", http_method_log(x), http_path_log(x), status, code, http_reason(x));
}

bool routes_precheck(void *ctx, http_exchange *x) {
    routes_ctx *rc = ctx;
    const server_opts *o = rc->o;
    const char *method = http_method(x), *host = http_header(x, "Host");
    /* DNS rebinding: a page of another site whose name now resolves to
     * 127.0.0.1 calls "its own" origin; its Host header gives it away. */
    bool check_host = o->allowed_hosts || (server_host_is_loopback(o->host) && !(o->api_key && o->api_key[0]));
    if (check_host && host && !host_allowed(o, host)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "Host '%.120s' is not allowed: a server on a loopback address without an API key answers only "
                 "localhost names and --allowed-hosts",
                 host);
        refuse(rc, x, 403, msg, "host_not_allowed");
        return false;
    }
    /* the key before the body is read, the only place it is checked
     * (routes_handle trusts it): all but GET /health, /load and the chat
     * page's files (unless --no-webui). These take no body: a body there
     * would be read and held without a key. */
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool path_known;
    const route *rt = route_find(method, http_path(x), &path_known, NULL, 0);
    bool exempt = (rt && rt->flags & RF_EXEMPT) || (get && !o->no_webui && webui_find(http_path(x)));
    if (exempt && http_body_announced(x)) {
        refuse(rc, x, 400, "this route takes no request body", "body_not_allowed");
        return false;
    }
    if (!exempt && routes_key_index(rc, x) == ROUTES_BAD_KEY) {
        refuse(rc, x, 401,
               http_header(x, "Authorization") || http_header(x, "x-api-key")
                   ? "invalid API key"
                   : "missing API key (Authorization: Bearer KEY, or x-api-key: KEY)",
               "invalid_api_key");
        return false;
    }
    /* Cross-site form posts: only a browser sends Origin, and a form cannot
     * send an API key; curl -d (urlencoded, no Origin) keeps working. */
    const char *ct = http_header(x, "Content-Type");
    if (!strcmp(method, "POST") && !(o->api_key && o->api_key[0]) && http_header(x, "Origin") && form_content_type(ct)) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "Content-Type '%.60s' is not accepted: the body must be JSON (Content-Type: application/json)", ct);
        refuse(rc, x, 415, msg, "unsupported_media_type");
        return false;
    }
    return true;
}

/* The routes_ctx that serves this request: the model its "model" field
 * names (models.h), with a reference, or root for the routes of no model
 * (listings, /health, load and unload). NULL when it answered an error in
 * the route's shape (an unknown name is a 404 model_not_found). */
static routes_ctx *route_model(routes_ctx *root, http_exchange *x, const route *rt) {
    models *ms = root->models;
    bool multi = models_count(ms) > 1;
    if (rt->flags & RF_ROOT || (multi && rt->flags & RF_LIST)) return root;
    char name[300];
    const char *want = NULL;
    bool get = !strcmp(rt->method, "GET");
    if (multi && !strcmp(http_method(x), "POST")) want = body_model(x, name, sizeof name);
    if (multi && get && rt->flags & RF_NAMED) want = http_query(x, "model"); /* llama-server's router: GET /props?model= */
    int st = 0;
    char msg[700];
    if (multi && !want && rt->flags & RF_NAMED) {
        /* their answers are one model's (tokenizer, context, template):
         * another model's would be wrong without a sign of it */
        snprintf(msg, sizeof msg, "%d models are served here: name one (%s%s%s)", models_count(ms),
                 get ? "GET " : "\"model\": NAME in the body", get ? rt->path : "", get ? "?model=NAME" : "");
        oai_reply_error(x, 400, msg, "model", NULL);
        return NULL;
    }
    routes_ctx *rc = models_acquire(ms, want, &st, msg, sizeof msg);
    if (rc) return rc;
    api_reply_error(rt->ops, x, st, msg, st == 404 ? "model" : NULL, st == 404 ? "model_not_found" : NULL);
    return NULL;
}

void routes_handle(void *ctx, http_exchange *x) {
    routes_ctx *root = ctx, *rc = root;
    int64_t t0 = clock_ns();
    const char *method = http_method(x), *path = http_path(x);
    bool path_known;
    char allow[120];
    const route *rt = route_find(method, path, &path_known, allow, sizeof allow);
    bool generation = false;
    /* the API key was checked once, from the headers (routes_precheck) */
    if (!rt && !rc->o->no_webui && webui_serve(x)) {
        /* the chat page and its assets: public, no API key (webui.h) */
    } else if (!rt) {
        char msg[400]; /* the 405 line with the longest Allow list fits */
        if (path_known) {
            snprintf(msg, sizeof msg, "method %.16s is not allowed on %.200s (allowed: %s)", method, path, allow);
            http_add_header(x, "Allow", allow);
        } else {
            snprintf(msg, sizeof msg, "no route for %.16s %.200s", method, path);
        }
        reply_error_shaped(x, path_known ? 405 : 404, msg, NULL);
    } else if (!(rc = route_model(root, x, rt))) {
        /* unknown name or a model that cannot load: answered in the API's shape */
    } else {
        oai_json_mark(); /* the replies' out-of-memory checkpoint (api.h) */
        if (rt->flags & RF_GEN) {
            atomic_fetch_add(&root->n_pending, 1);
            generation = api_serve(rt->ops, rc, x, gen_path(rt));
            atomic_fetch_sub(&root->n_pending, 1);
        } else {
            rt->handler(rt, root, rc, x);
        }
        /* a generation releases its model when its answer is written (gen_done) */
        if (!generation && rc != root) models_release(rc);
    }
    /* Generation requests that reached the engine count and log themselves
     * when they end (a stream ends after this handler returns). */
    if (generation) return;
    metrics_count(root->met, http_status(x));
    /* a balancer polls /health and /load several times a second: those
     * successes are debug lines, not the log */
    bool poll = rt && rt->flags & RF_POLL && http_status(x) == 200;
    const char *why = http_status(x) >= 400 ? http_reason(x) : "";
    log_msg(poll ? LOG_DEBUG : LOG_INFO, "%s %s %d %.1fms%s%s%s", http_method_log(x), http_path_log(x),
            http_status(x), (double)(clock_ns() - t0) / 1e6, *why ? " (" : "", why, *why ? ")" : "");
}
