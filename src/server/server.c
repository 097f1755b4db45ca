/*
 * server.c — `kvloom serve`: flag parsing and the server's life cycle
 * (contract in server.h).
 *
 *   bind the port (fail fast) ─▶ load model + tokenizer (+ chat template)
 *   ─▶ engine thread ─▶ HTTP threads ─▶ wait for SIGINT/SIGTERM
 *   ─▶ drain: close the listening socket, new requests 503, running ones
 *      get --shutdown-timeout seconds ─▶ stop the engine (what remains ends
 *      cancelled: error event + [DONE], or 503) ─▶ stop HTTP ─▶ free
 *
 * Nothing here exits the process: errors are logged and returned to the CLI.
 */
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../model/model.h"
#include "../sched/draft.h"
#include "../sched/engine.h"
#include "../tok/tok.h"
#include "http.h"
#include "metrics.h"
#include "apis.h"
#include "routes.h"
#include "models.h"
#include "procmem.h"
#include "../chat/chat.h"
#include "../base/flags.h"

bool server_host_is_loopback(const char *host) {
    if (!host || !*host || !strcasecmp(host, "localhost") || !strcmp(host, "::1")) return true;
    unsigned a, b, c, d;
    char end;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &end) == 4 && a == 127 && b < 256 && c < 256 && d < 256;
}

void server_opts_default(server_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->kv_mem_bytes = 0; /* auto: kv_auto_bytes */
    o->kv_policy = ENGINE_KV_AGENT;
    o->kv_ttl_max_s = 60;
    o->max_batch_tokens = 512;
    o->max_running = 64;
    o->max_queue = 256;
    o->client_max_queued = -1;
    o->client_max_parked = 16;
    o->park_timeout_s = 2;
    o->park_bytes = 64 << 10;
    o->mask_budget_ms = 20;
    o->block_tokens = 16;
    o->max_body_bytes = (size_t)8 << 20;
    o->max_connections = 1024;
    o->timeout_s = 60;
    o->header_timeout_s = 10;
    o->body_timeout_s = 60;
    o->shutdown_timeout_s = 10;
    o->stall_timeout_s = 30;
    o->spec = DRAFT_NGRAM; /* docs/perf.md, "The default: --spec ngram" */
    o->spec_max = 8;
}

/* Adds an accepted key (the first is also o->api_key). */
static int add_key(server_opts *o, const char *key, err_t *e) {
    if (o->n_api_keys >= SERVER_MAX_API_KEYS)
        return err_set(e, ERR_INVALID, "--api-key: at most %d keys", SERVER_MAX_API_KEYS);
    o->api_keys[o->n_api_keys++] = key;
    if (!o->api_key) o->api_key = key;
    return 0;
}

/* --api-key-file: every non-empty line is a key, its first word
 * (trailing whitespace dropped; lines that start with '#' are comments),
 * optionally followed by the key's priority class: `interactive` (0, the
 * default), `batch` (SERVER_PRIORITY_BATCH) or `priority=N` (0..1000).
 * The class is the key's requests' default and the most urgent they may
 * ask for: a `priority` field below it is raised to it, one above it is
 * kept (docs/server.md, "Many clients"). */
static int key_class(const char *path, int line_no, const char *w, int *out, err_t *e) {
    long v;
    if (!strcmp(w, "interactive")) *out = 0;
    else if (!strcmp(w, "batch")) *out = SERVER_PRIORITY_BATCH;
    else if (!strncmp(w, "priority=", 9) && parse_long(w + 9, 0, OAI_MAX_PRIORITY, &v)) *out = (int)v;
    else
        return err_set(e, ERR_INVALID,
                       "--api-key-file: '%s' line %d: '%s' is not a priority class (interactive, batch or "
                       "priority=N with N in [0, %d])",
                       path, line_no, w, OAI_MAX_PRIORITY);
    return 0;
}

static int read_key_file(const char *path, server_opts *o, err_t *e) {
    char *buf = NULL;
    size_t n = 0;
    if (file_read_all(path, &buf, &n, e) < 0) {
        err_prefix(e, "--api-key-file");
        return ERR_INVALID;
    }
    size_t used = 0;
    int n_keys = 0, rc = 0, line_no = 0;
    for (char *line = buf; *line && rc == 0;) {
        size_t k = strcspn(line, "\r\n");
        char *next = line + k + (line[k] ? 1 : 0);
        line[k] = 0;
        line_no++;
        while (k && isspace((unsigned char)line[k - 1])) line[--k] = 0;
        while (k && isspace((unsigned char)*line)) line++, k--;
        size_t kw = strcspn(line, " \t"); /* the key; then its class, if any */
        int prio = 0;
        if (kw < k) {
            line[kw] = 0;
            char *w = line + kw + 1;
            while (isspace((unsigned char)*w)) w++;
            if (line[0] != '#' && kw) rc = key_class(path, line_no, w, &prio, e);
            k = kw;
        }
        if (rc == 0 && k && line[0] != '#') {
            if (used + k + 1 > sizeof o->api_key_file_buf)
                rc = err_set(e, ERR_INVALID, "--api-key-file: the keys in '%s' take more than %zu bytes", path,
                             sizeof o->api_key_file_buf - 1);
            else {
                memcpy(o->api_key_file_buf + used, line, k + 1);
                rc = add_key(o, o->api_key_file_buf + used, e);
                if (rc == 0) o->api_key_priority[o->n_api_keys - 1] = prio;
                used += k + 1;
                n_keys++;
            }
        }
        line = next;
    }
    free(buf);
    if (rc == 0 && !n_keys) return err_set(e, ERR_INVALID, "--api-key-file: '%s' holds no key", path);
    return rc;
}

/* --cors-origin: "*", or origins "http[s]://host[:port]" separated by commas
 * (a trailing '/' is tolerated; http.c compares them with the Origin header). */
static int parse_cors(const char *v, server_opts *o, err_t *e) {
    if (o->n_cors_origins >= SERVER_MAX_CORS)
        return err_set(e, ERR_INVALID, "--cors-origin: at most %d flags (use a comma list)", SERVER_MAX_CORS);
    const char *p = v;
    int n = 0;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        size_t k = strcspn(p, ",");
        size_t len = k;
        while (len && p[len - 1] == ' ') len--;
        if (len) {
            bool star = len == 1 && p[0] == '*';
            bool scheme = (len > 7 && !strncmp(p, "http://", 7)) || (len > 8 && !strncmp(p, "https://", 8));
            const char *host = scheme ? strstr(p, "//") + 2 : NULL;
            const char *slash = host ? memchr(host, '/', len - (size_t)(host - p)) : NULL;
            if (!star && (!scheme || (slash && slash != p + len - 1)))
                return err_set(e, ERR_INVALID,
                               "--cors-origin: '%.*s' is not an origin such as http://localhost:3000 (or *)", (int)len, p);
            n++;
        }
        p += k;
    }
    if (!n) return err_set(e, ERR_INVALID, "--cors-origin: no origin in '%s'", v);
    o->cors_origins[o->n_cors_origins++] = v;
    return 0;
}

/* ---- the flags (flags.h) ---- */

#define O(field) offsetof(server_opts, field)
#define SET(fn) static int fn(const flag_row *f, const char *a, const char *v, void *opts, err_t *e)

SET(set_model) {
    server_opts *o = opts;
    if (o->n_models == SERVER_MAX_MODELS) return err_set(e, ERR_INVALID, "-m: at most %d models", SERVER_MAX_MODELS);
    if (!o->model_path) o->model_path = v;
    o->model_paths[o->n_models++] = v;
    return 0;
}
SET(set_alias) {
    server_opts *o = opts;
    /* the alias of the -m before it (of the first or only model when none) */
    if (!o->alias) o->alias = v;
    o->model_aliases[o->n_models ? o->n_models - 1 : 0] = v;
    return 0;
}
SET(set_api_key) {
    if (!*v) return err_set(e, ERR_INVALID, "--api-key: the key is empty (omit --api-key to serve without one)");
    return add_key(opts, v, e);
}
SET(set_key_file) { return read_key_file(v, opts, e); }
SET(set_cors) { return parse_cors(v, opts, e); }
SET(set_allowed_hosts) {
    if (!*v) return err_set(e, ERR_INVALID, "--allowed-hosts: empty list");
    ((server_opts *)opts)->allowed_hosts = v;
    return 0;
}
SET(set_spec_cost) {
    float c;
    if (!parse_float(v, &c) || !(c > 0) || c > 100)
        return err_set(e, ERR_INVALID, "--spec-token-cost: expected a cost in (0, 100], got '%s'", v);
    ((server_opts *)opts)->spec_token_cost = c;
    return 0;
}
SET(set_tool_format) {
    tc_format t;
    if (strcmp(v, "auto") != 0 && tc_format_from_name(v, &t, e) < 0) return err_prefix(e, "--tool-format"), ERR_INVALID;
    ((server_opts *)opts)->tool_format = v;
    return 0;
}
SET(set_client_max_kv) {
    size_t lv = strlen(v);
    char num[32]; /* "50" or "50%" */
    snprintf(num, sizeof num, "%.*s", (int)(lv && v[lv - 1] == '%' ? lv - 1 : lv), v);
    float pct;
    if (lv >= sizeof num || !parse_float(num, &pct) || !(pct >= 0) || pct > 100)
        return err_set(e, ERR_INVALID, "%s: expected a percentage of the KV pool in [0, 100], got '%s'", a, v);
    ((server_opts *)opts)->client_max_kv = pct / 100.0;
    return 0;
}
SET(set_kv_policy) {
    server_opts *o = opts;
    if (!strcmp(v, "agent")) o->kv_policy = ENGINE_KV_AGENT;
    else if (!strcmp(v, "lru")) o->kv_policy = ENGINE_KV_LRU;
    else return err_set(e, ERR_INVALID, "--kv-policy: '%s' is not a policy (agent or lru)", v);
    return 0;
}
SET(set_spec) {
    draft_kind k;
    if (draft_kind_parse(v, &k, e) < 0) return err_prefix(e, "--spec"), ERR_INVALID;
    ((server_opts *)opts)->spec = (int)k;
    ((server_opts *)opts)->spec_given = true;
    return 0;
}
SET(set_kv_type) {
    server_opts *o = opts;
    /* K and V share one type (model.h's model_kv): -ctk and -ctv that
     * disagree are refused, not resolved by order */
    model_kv_type t;
    if (!model_kv_type_parse(v, &t))
        return err_set(e, ERR_INVALID, "%s: KV cache type '%s' is not supported (f16 or q8_0)", a, v);
    if (o->kv_type_set && t != o->kv_type)
        return err_set(e, ERR_INVALID, "%s %s: K and V share one cache type here, and another flag gave %s", a, v,
                       model_kv_type_name(o->kv_type));
    o->kv_type = t;
    o->kv_type_set = true;
    return 0;
}
/* llama-server's flags that change nothing here (said once at start) */
SET(set_jinja) { return ((server_opts *)opts)->noop_flags |= SERVER_NOOP_JINJA, 0; }
SET(set_metrics) { return ((server_opts *)opts)->noop_flags |= SERVER_NOOP_METRICS, 0; }
SET(set_flash_attn) {
    /* the older spelling is a bare flag, the newer one takes on|off|auto */
    ((server_opts *)opts)->noop_flags |= SERVER_NOOP_FLASH_ATTN;
    return v && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto")) ? 0 : 1;
}
SET(set_verbose) { return log_level = LOG_DEBUG, 0; }

/* serve's flags, in the order of its usage (docs/server.md lists the same:
 * tests/flags_doc_test.sh). */
static const flag_row serve_flags[] = {
    FLAG_ROW("-m, --model", NULL, "PATH", "GGUF model (default " SERVER_DEFAULT_MODEL ")", FLAG_FN, .set = set_model),
    FLAG_ROW("--alias", "-a", "NAME", "model id of the -m before it (default: file name without .gguf)", FLAG_FN,
             .set = set_alias),
    FLAG_ROW(
        "--models-dir", NULL, "DIR",
        "serve every DIR/*.gguf, by file name (with -m: those too);\nthe request's model field selects, loaded on first use",
        FLAG_STR, O(models_dir)),
    FLAG_ROW("--models-max", NULL, "N", "models resident at once, least recently used unloaded (default 4)", FLAG_INT,
             O(models_max), 1, 256),
    FLAG_ROW("--models-idle", NULL, "S", "unload a model unused for S seconds (default 0: never)", FLAG_INT,
             O(models_idle_s), 0, 1 << 30),
    FLAG_ROW("--host", NULL, "ADDR", "numeric address to bind (default 127.0.0.1)", FLAG_STR, O(host)),
    FLAG_ROW("--port", NULL, "N", "TCP port (default 8080; 0 = any free port)", FLAG_INT, O(port), 0, 65535),
    FLAG_ROW(
        "--kv-mem", NULL, "BYTES",
        "KV cache size, K/M/G suffixes allowed (default: one full context\nof the model, at least 256M, within the free "
        "memory)",
        FLAG_SIZE, O(kv_mem_bytes)),
    FLAG_ROW("--max-batch-tokens", NULL, "N", "tokens per engine step (default 512)", FLAG_INT, O(max_batch_tokens), 1,
             1 << 20),
    FLAG_ROW("--max-running", "-np --parallel", "N", "sequences decoded together at most (default 64)", FLAG_INT,
             O(max_running), 1, 4096),
    FLAG_ROW("--max-queue", NULL, "N", "waiting requests before 429 (default 256)", FLAG_INT, O(max_queue), 0, 1 << 20),
    FLAG_ROW(
        "--client-max-queued", NULL, "N",
        "one client's waiting requests before its 429 (default 3/4 of\n--max-queue; 0: no limit of its own). A client is "
        "its API key,\nelse the body's 'user', else its address",
        FLAG_INT, O(client_max_queued), 0, 1 << 20),
    FLAG_ROW(
        "--grammar-mask-budget", NULL, "MS",
        "a request's grammar masks may take MS of CPU per token on average\n(after 8 tokens' worth); past it the request "
        "fails with a 400\n(default 20, fractions allowed; 0: no budget)",
        FLAG_REAL, O(mask_budget_ms), 0, 3600e3, "milliseconds"),
    FLAG_ROW(
        "--grammar-mask-sync", NULL, NULL,
        "compute grammar masks inside the engine's step (default: on a\nworker thread, overlapped with the forward pass; a "
        "request\nwhose mask is late sits out a step instead of stalling all)",
        FLAG_ON, O(mask_sync)),
    FLAG_ROW("--no-fair-decode", NULL, NULL,
             "no decode share between clients: the client with the most rows\nin a step no longer sits rows out "
             "beside others (throughput\nfor clients that trust each other; docs/server.md \"Decode share\")",
             FLAG_ON, O(no_fair_decode)),
    FLAG_ROW(
        "--client-max-running", NULL, "N",
        "one client's running sequences at most (default 0: no cap; the\nfair share preempts a client above it for one "
        "below it)",
        FLAG_INT, O(client_max_running), 0, 4096),
    FLAG_ROW(
        "--api-key", NULL, "KEY",
        "require 'Authorization: Bearer KEY' (all routes but /health);\nrepeatable: each key is a client of its own",
        FLAG_FN, .set = set_api_key),
    FLAG_ROW(
        "--api-key-file", NULL, "FILE",
        "the same, every non-empty line of FILE a key ('#' comments),\noptionally followed by its priority class: "
        "interactive\n(default), batch or priority=N (its requests' default and\nthe most urgent 'priority' they may ask "
        "for)",
        FLAG_FN, .set = set_key_file),
    FLAG_ROW("-t, --threads", NULL, "N", "compute threads (default: all CPUs)", FLAG_INT, O(n_threads), 1, 1024),
    FLAG_ROW("-c, --ctx", "--ctx-size", "N", "positions per sequence (default: the model's training context)", FLAG_INT,
             O(n_ctx), 0, 1 << 24),
    FLAG_ROW("--block-tokens", NULL, "N", "tokens per KV block (default 16)", FLAG_INT, O(block_tokens), 1, 1024),
    FLAG_ROW(
        "--kv-policy", NULL, "agent|lru",
        "KV lifetime: agent (default) pins a finished turn's blocks for\nthe client's predicted return; lru keeps recency "
        "order only",
        FLAG_FN, .set = set_kv_policy),
    FLAG_ROW("--kv-ttl-max", NULL, "SECONDS", "upper bound of a pin's time-to-live (default 60)", FLAG_INT,
             O(kv_ttl_max_s), 1, 86400),
    FLAG_ROW("--kv-disk", NULL, "DIR",
             "keep KV blocks on disk in DIR too (written through, read\nback instead of recomputed; survives restarts)",
             FLAG_STR, O(kv_disk_dir)),
    FLAG_ROW("--kv-disk-size", NULL, "BYTES", "size cap of --kv-disk, least recently used deleted (default none)",
             FLAG_SIZE, O(kv_disk_max_bytes)),
    FLAG_ROW(
        "--spec", NULL, "off|ngram|suffix|draft",
        "speculative decoding's drafter (default ngram): ngram looks\nthe last tokens up in the request's context; suffix "
        "also uses\nearlier requests' outputs; draft runs --draft-model (exact: the\noutput is --spec off's, in "
        "distribution above temperature 0)",
        FLAG_FN, .set = set_spec),
    FLAG_ROW("--draft-model", NULL, "FILE.gguf",
             "a small model with the model's vocabulary drafting for it\n(implies --spec draft; one -m only)", FLAG_STR,
             O(draft_model)),
    FLAG_ROW("--spec-max", NULL, "K", "draft tokens per sequence per step at most (default 8, <= 32)", FLAG_INT,
             O(spec_max), 1, DRAFT_MAX),
    FLAG_ROW("--max-body", NULL, "BYTES", "request body limit (default 8M)", FLAG_SIZE, O(max_body_bytes)),
    FLAG_ROW("--max-connections", NULL, "N", "simultaneous connections (default 1024; an idle one costs no thread)",
             FLAG_INT, O(max_connections), 1, 65536),
    FLAG_ROW(
        "--max-conns-per-ip", NULL, "N",
        "connections per client address, all loopback addresses as one\n(default 64, none when --host is a loopback "
        "address)",
        FLAG_INT, O(max_conns_per_ip), 1, 65536),
    FLAG_ROW("--max-body-total", NULL, "BYTES", "request bodies held at once, 503 beyond (default 4x --max-body)",
             FLAG_SIZE, O(max_body_total)),
    FLAG_ROW("--header-timeout", NULL, "S", "a request's headers must arrive within S seconds (default 10)", FLAG_INT,
             O(header_timeout_s), 1, 3600),
    FLAG_ROW("--grammar-cache", NULL, "BYTES", "masks and DFA states of the 32 cached grammars together (default 1G)",
             FLAG_SIZE, O(grammar_cache_bytes)),
    FLAG_ROW("--responses-store", NULL, "BYTES", "memory of the stored /v1/responses answers (default 256M)", FLAG_SIZE,
             O(responses_store_bytes)),
    FLAG_ROW("--body-timeout", NULL, "S", "a request's body must be complete S seconds after its headers (default 60)",
             FLAG_INT, O(body_timeout_s), 1, 86400),
    FLAG_ROW("--timeout", NULL, "S", "close a keep-alive connection idle for S seconds (default 60)", FLAG_INT,
             O(timeout_s), 1, 86400),
    FLAG_ROW(
        "--stall-timeout", NULL, "S",
        "cancel a request whose client has taken none of its generated\noutput for S seconds (a stream nobody reads; "
        "default 30, 0: never)",
        FLAG_INT, O(stall_timeout_s), 0, 86400),
    FLAG_ROW(
        "--park-timeout", NULL, "S",
        "park such a request after S seconds (default 2, at most half of\n--stall-timeout; 0: never): it gives back its "
        "slot and KV blocks\nand runs again once its client has read what it had",
        FLAG_REAL, O(park_timeout_s), 0, 86400, "seconds"),
    FLAG_ROW(
        "--park-bytes", NULL, "BYTES",
        "park it at once when BYTES of its stream wait unsent (the stream's\nbuffer and the socket's send queue; default "
        "64K; 0: by time only)",
        FLAG_SIZE, O(park_bytes)),
    FLAG_ROW("--client-max-parked", NULL, "N", "one client's parked requests before its 429 (default 16; 0: none)",
             FLAG_INT, O(client_max_parked), 0, 1 << 20),
    FLAG_ROW(
        "--client-max-kv", NULL, "PCT",
        "one client's running requests may hold PCT% of the KV pool; at it\nits new requests get a 429 (default 0: no "
        "limit of its own)",
        FLAG_FN, .set = set_client_max_kv),
    FLAG_ROW(
        "--allowed-hosts", NULL, "LIST",
        "Host names accepted besides localhost and the bound address\n(comma list; checked on loopback without --api-key)",
        FLAG_FN, .set = set_allowed_hosts),
    FLAG_ROW("--ready-file", NULL, "PATH", "write the bound port to PATH once listening", FLAG_STR, O(ready_file)),
    FLAG_ROW("--chat-template-file", NULL, "F", "use the Jinja chat template in F instead of the model's", FLAG_STR,
             O(chat_template_file)),
    FLAG_ROW("--tool-format", NULL, "NAME",
             "tool-call syntax: auto (from the chat template), hermes,\nllama3, mistral, generic", FLAG_FN,
             .set = set_tool_format),
    FLAG_ROW(
        "--cors-origin", NULL, "ORIGIN",
        "let pages of ORIGIN call the API from a browser (repeatable,\nor a comma list; * for any); default: none (same "
        "origin only)",
        FLAG_FN, .set = set_cors),
    FLAG_ROW("--shutdown-timeout", NULL, "S",
             "on SIGINT/SIGTERM, let running requests finish for S seconds\nbefore cancelling them (default 10)",
             FLAG_INT, O(shutdown_timeout_s), 0, 86400),
    FLAG_ROW("--check", NULL, NULL, "verify KV pool and prefix tree after every step (debug)", FLAG_ON, O(check)),
    FLAG_ROW("--step-delay-us", NULL, "N", "sleep N us after every engine step (testing)", FLAG_INT, O(step_delay_us),
             0, 10000000),
    FLAG_ROW(
        "--spec-token-cost", NULL, "C",
        "a draft token's cost relative to a step's fixed cost, instead of\nthe one learnt from the steps' times (testing)",
        FLAG_FN, .set = set_spec_cost),
    FLAG_ROW("--mask-spin-us", NULL, "N", "every grammar mask also spins N us on the CPU (testing)", FLAG_INT,
             O(mask_spin_us), 0, 10000000),
    FLAG_ROW("--load-delay-ms", NULL, "N", "sleep N ms in every model load (testing)", FLAG_INT, O(load_delay_ms), 0,
             600000),
    FLAG_ROW("--no-webui", NULL, NULL, "no chat page at /", FLAG_ON, O(no_webui)),
    FLAG_ROW("--log-file", NULL, "FILE", "append the log to FILE too", FLAG_STR, O(log_file)),
    FLAG_ROW(
        "--kv-type", "-ctk -ctv --cache-type-k --cache-type-v", "f16|q8_0",
        "KV cache type, K and V (-ctk/-ctv, --cache-type-k/v: the same); q8_0 takes\nabout half the memory per token",
        FLAG_FN, .set = set_kv_type),
    FLAG_ROW("-v, --verbose", NULL, NULL, "debug logging", FLAG_FN, .set = set_verbose),
    /* llama-server's, said in the usage's last lines */
    FLAG_ROW("--jinja", NULL, NULL, NULL, FLAG_FN, .set = set_jinja),
    FLAG_ROW("--metrics", NULL, NULL, NULL, FLAG_FN, .set = set_metrics),
    FLAG_ROW("-fa, --flash-attn", NULL, "[on|off|auto]", NULL, FLAG_FN, .set = set_flash_attn),
};

static const flag_cmd serve_cmd = {
    "serve",
    "usage: kvloom serve [-m MODEL.gguf [--alias NAME]]... [--models-dir DIR] [options]\n",
    "llama-server spellings: -c/--ctx-size (--ctx), -np/--parallel (--max-running), -a (--alias),\n"
    "-ctk/-ctv/--cache-type-k/--cache-type-v (--kv-type); --jinja, -fa/--flash-attn [on|off|auto] and\n"
    "--metrics are accepted and change nothing.\n",
    serve_flags,
    ARRAY_LEN(serve_flags),
};

int server_parse_args(int argc, char **argv, server_opts *o, err_t *e) {
    int rc = flags_parse(&serve_cmd, argc, argv, o, e);
    if (rc) return rc;
    if (o->draft_model && !o->spec_given) o->spec = DRAFT_MODEL;
    if (o->spec == DRAFT_MODEL && !o->draft_model)
        return err_set(e, ERR_INVALID, "--spec draft needs --draft-model FILE.gguf");
    if (o->draft_model && o->spec != DRAFT_MODEL)
        return err_set(e, ERR_INVALID, "--draft-model drafts with --spec draft, not --spec %s",
                       draft_kind_name((draft_kind)o->spec));
    if (o->draft_model && (o->n_models > 1 || o->models_dir))
        return err_set(e, ERR_INVALID, "--draft-model drafts for one model: give one -m (not several, nor --models-dir)");
    if (o->max_body_total && o->max_body_total < o->max_body_bytes)
        return err_set(e, ERR_INVALID, "--max-body-total (%zu bytes) must be at least --max-body (%zu bytes)",
                       o->max_body_total, o->max_body_bytes);
    return 0;
}
#undef SET
#undef O

/* Signals (decisions in docs/server.md "Shutdown"): SIGINT, SIGTERM, SIGHUP
 * (the terminal went away) and SIGQUIT drain: the first starts the drain,
 * a second cuts it short. SIGUSR1 and SIGUSR2 log one status line and
 * change nothing (a supervisor's "are you alive, what are you doing"). */
static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_signal;
static volatile sig_atomic_t g_status;
static void on_signal(int sig) {
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        g_status = 1;
        return;
    }
    g_signal = sig;
    if (g_stop < 2) g_stop++;
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "SIGTERM";
    }
}

/* SIGUSR1: what the server is doing, in one line (per-model engine state
 * is on /metrics). */
static void log_status(http_server *hs, resp_store *rs) {
    int n_stored;
    size_t stored_bytes;
    resp_store_stats(rs, &n_stored, &stored_bytes);
    log_info("status: %d requests in flight; %d stored responses (%.1f MB)", http_wait_idle(hs, 0), n_stored,
             (double)stored_bytes / 1e6);
}

/* Waits up to timeout_s for the requests in flight to finish, waking up to
 * notice a second signal. Returns how many are still running. */
static int drain_wait(http_server *hs, int timeout_s) {
    int64_t end = clock_ns() + (int64_t)timeout_s * 1000000000LL;
    int left = http_wait_idle(hs, 0);
    while (left > 0 && g_stop < 2) {
        int64_t ms = (end - clock_ns()) / 1000000;
        if (ms <= 0) break;
        left = http_wait_idle(hs, (int)MIN(ms, 100));
    }
    return left;
}

/* The address a person types: a wildcard bind is reached at localhost. */
static void print_url(char *out, size_t cap, const char *host, int port) {
    if (!host || !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "localhost")) host = "127.0.0.1";
    if (!strcmp(host, "::")) host = "::1";
    snprintf(out, cap, strchr(host, ':') ? "http://[%s]:%d/" : "http://%s:%d/", host, port);
}

int server_main(const server_opts *o) {
    err_t e = {0};
    http_server *hs = NULL;
    models *ms = NULL;
    routes_ctx shared;
    int rcode = 0;
    int listen_fd = -1;

    oai_json_init(); /* jansson's allocations counted (oai.h): before any thread parses */
    procmem_limit_allocator(); /* before any thread allocates (procmem.h) */
    log_set_timestamps(true);
    if (o->log_file && (rcode = log_set_file(o->log_file, &e)) < 0) {
        log_error("serve: --log-file: %s", e.msg);
        return rcode;
    }

    /* The port first: a taken port is a one-line error before seconds of
     * model loading. */
    if ((rcode = http_listen(o->host, o->port, &listen_fd, &e)) < 0) {
        if (strstr(e.msg, "is in use"))
            log_error("serve: port %d is in use (--port to choose another)", o->port);
        else
            log_error("serve: %s", e.msg);
        return rcode;
    }
    log_info("serve: kvloom %s", KVLOOM_VERSION);
    if (o->noop_flags & SERVER_NOOP_JINJA)
        log_info("serve: --jinja changes nothing: chat templates are always rendered as Jinja");
    if (o->noop_flags & SERVER_NOOP_FLASH_ATTN)
        log_info("serve: --flash-attn changes nothing: attention always runs in chunks over the paged KV with an "
                 "online softmax");
    if (o->noop_flags & SERVER_NOOP_METRICS) log_info("serve: --metrics changes nothing: /metrics is always served");
    memset(&shared, 0, sizeof shared);
    shared.o = o;
    shared.met = metrics_new();
    shared.responses = resp_store_new(o->responses_store_bytes);
    shared.created = (long long)time(NULL);
    atomic_init(&shared.next_id, 1);
    atomic_init(&shared.n_pending, 0);
    if ((rcode = models_new(o, &shared, &ms, &e)) < 0) {
        log_error("serve: %s", e.msg);
        goto out;
    }
    shared.models = ms;
    /* One model loads now (a bad file is a start-up error, as always);
     * several load on first use (models.h). */
    if (models_count(ms) == 1) {
        int st;
        char msg[1024];
        routes_ctx *rc = models_acquire(ms, NULL, &st, msg, sizeof msg);
        if (!rc) {
            log_error("serve: %s", msg);
            rcode = ERR_INVALID;
            goto out;
        }
        models_release(rc);
    }

    http_config hc = {.host = o->host,
                      .port = o->port,
                      .max_body_bytes = o->max_body_bytes,
                      .max_body_total = o->max_body_total,
                      .max_connections = o->max_connections,
                      /* every request the engine may hold (running or
                       * queued) can wait in its handler, plus room for the
                       * quick routes; beyond, the engine answers 429 */
                      .max_handlers = (int)MIN((long)o->max_running + o->max_queue + 16, 4096L),
                      .max_conns_per_ip = o->max_conns_per_ip ? o->max_conns_per_ip
                                          : server_host_is_loopback(o->host) ? 0 : 64,
                      .timeout_s = o->timeout_s,
                      .header_timeout_s = o->header_timeout_s,
                      .body_timeout_s = o->body_timeout_s,
                      /* the engine cancels such a request at --stall-timeout
                       * (and counts it); the connection goes 2 s later */
                      .stall_timeout_s = o->stall_timeout_s > 0 ? o->stall_timeout_s + 2 : 0,
                      /* parked by bytes only where parking is on */
                      .park_bytes = o->park_timeout_s > 0 ? o->park_bytes : 0,
                      /* and by the socket: its client's kernel acknowledged
                       * nothing for --park-timeout (docs/server.md, "Clients
                       * that never read") */
                      .park_idle_ms = o->park_timeout_s > 0 && o->park_bytes ? (int)(o->park_timeout_s * 1000) : 0,
                      .precheck = routes_precheck,
                      .error_body = routes_error_body,
                      .listen_fd = listen_fd,
                      .cors_origins = o->cors_origins,
                      .n_cors_origins = o->n_cors_origins};
    listen_fd = -1; /* http_start owns it now, also when it fails */
    if ((rcode = http_start(&hc, routes_handle, &shared, &hs, &e)) < 0) {
        log_error("serve: %s", e.msg);
        goto out;
    }
    log_info("serve: %d model%s (up to %d resident), listening on http://%s:%d", models_count(ms),
             models_count(ms) == 1 ? "" : "s", models_count(ms) == 1 ? 1 : (o->models_max > 0 ? o->models_max : SERVER_MODELS_MAX_DEFAULT),
             o->host ? o->host : "127.0.0.1", http_port(hs));
    if (o->ready_file) {
        FILE *f = fopen(o->ready_file, "w");
        if (f) {
            fprintf(f, "%d\n", http_port(hs));
            fclose(f);
        } else {
            log_warn("serve: cannot write --ready-file %s", o->ready_file);
        }
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < ARRAY_LEN(sigs); i++) sigaction(sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    char url[300];
    print_url(url, sizeof url, o->host, http_port(hs));
    log_info("serve: chat at %s  (API: %sv1, Ctrl-C stops)", url, url);
    for (int tick = 0; !g_stop; tick++) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        if (tick % 20 == 19) models_tick(ms); /* --models-idle */
        if (tick % 20 == 9) procmem_trim();   /* freed memory back to the system (docs/server.md, "Memory budget") */
        if (g_status) {
            g_status = 0;
            log_status(hs, shared.responses);
        }
    }
    int n_running = http_drain(hs);
    log_info("serve: %s: shutting down; %d request%s running, up to %d s to finish (again to cancel now)",
             signal_name(g_signal), n_running, n_running == 1 ? "" : "s", o->shutdown_timeout_s);
    int n_left = drain_wait(hs, o->shutdown_timeout_s);
    /* Stopping the engines ends every request they still hold as
     * cancelled: the handlers answer 503 or end their streams with an error
     * event and [DONE]; give them a moment to write that out. */
    models_stop(ms);
    if (n_left > 0 && http_wait_idle(hs, 3000) > 0) log_warn("serve: %d connections did not finish writing", http_wait_idle(hs, 0));
    log_info("shutdown: %d request%s finished, %d cancelled", n_running - n_left < 0 ? 0 : n_running - n_left,
             n_running - n_left == 1 ? "" : "s", n_left);
    rcode = 0;
out:
    /* The engines stop first so that waiting handlers see their requests
     * end (cancelled) and the HTTP threads can finish. */
    if (ms) models_stop(ms);
    if (hs) http_stop(hs);
    models_free(ms);
    metrics_free(shared.met);
    resp_store_free(shared.responses);
    if (listen_fd >= 0) close(listen_fd);
    return rcode;
}
