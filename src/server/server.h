/*
 * server.h — `kvloom serve`: the OpenAI-compatible HTTP server.
 *
 * Place in the flow: the top of the request path. server_main loads the model
 * and tokenizer, starts the engine thread (sched/engine.h) and the HTTP
 * threads (http.h), and serves until SIGINT/SIGTERM:
 *
 *   POST /v1/completions, /v1/chat/completions   (JSON or SSE)
 *   GET  /v1/models, /health, /metrics
 *   GET  /  (the chat page, webui.h)
 *   POST /tokenize, /detokenize
 *
 * The CLI only calls server_parse_args and server_main; see docs/server.md
 * for the flags, the routes and the engine design.
 */
#ifndef KVLOOM_SERVER_H
#define KVLOOM_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/base.h"
#include "../model/model.h"
#include "../tok/tok.h"

#define SERVER_MAX_CORS 16
#define SERVER_MAX_MODELS 64        /* -m given at most this often              */
#define SERVER_MODELS_MAX_DEFAULT 4 /* --models-max                             */
#define SERVER_MAX_API_KEYS 64
/* The priority class of --api-key-file's `batch` keys (req.priority; 0 is
 * interactive): room below and above it for finer classes (priority=N). */
#define SERVER_PRIORITY_BATCH 100

typedef struct server_opts {
    const char *model_path;   /* -m; NULL: SERVER_DEFAULT_MODEL                       */
    const char *alias;        /* --alias: model id in the API; NULL: file base name   */
    /* several models (models.h): every -m, each with the --alias after it */
    const char *model_paths[SERVER_MAX_MODELS];
    const char *model_aliases[SERVER_MAX_MODELS];
    int n_models;
    const char *models_dir;   /* --models-dir: every *.gguf in it, by file name      */
    int models_max;           /* --models-max resident at once; 0: 4                  */
    int models_idle_s;        /* --models-idle: unload after so long unused; 0 never */
    const char *host;         /* --host, numeric address; default "127.0.0.1"         */
    int port;                 /* --port; default 8080; 0 = any free port              */
    model_kv_type kv_type;    /* --kv-type (f16 default)                               */
    bool kv_type_set;
    size_t kv_mem_bytes;      /* --kv-mem (accepts K/M/G suffixes); 0 (default): one
                                 full context, at least SERVER_KV_MIN_BYTES, within
                                 the free memory (server.c kv_auto_bytes)         */
    int max_batch_tokens;     /* --max-batch-tokens; default 512                      */
    int max_running;          /* --max-running sequences per batch; default 64        */
    int max_queue;            /* --max-queue waiting requests before 429; default 256 */
    int client_max_queued;    /* --client-max-queued: one client's waiting requests
                                 before its 429; -1 (default): 3/4 of max_queue (the
                                 last quarter is for the others); 0: no own limit */
    int client_max_running;   /* --client-max-running; 0 (default): the fair share only */
    double client_max_kv;     /* --client-max-kv PCT as a share (0..1); 0 (default): none */
    int client_max_parked;    /* --client-max-parked; default 16; 0: none              */
    double park_timeout_s;    /* --park-timeout: park a stream unread this long; default 2 */
    size_t park_bytes;        /* --park-bytes: park it once this much waits unsent; 64K; 0: off */
    double mask_budget_ms;    /* --grammar-mask-budget: CPU per constrained token of a
                                 request's grammar masks, on average; default 20; 0: none */
    bool mask_sync;           /* --grammar-mask-sync: masks inside the step (engine_opts) */
    bool no_fair_decode;      /* --no-fair-decode: engine_opts.no_decode_share */
    const char *api_key;      /* the first of api_keys (NULL: no key, open server)     */
    /* Every accepted key: --api-key, repeatable, and the lines of
     * --api-key-file. Each key is a client identity (its stored responses,
     * its prefix-cache salt). */
    const char *api_keys[SERVER_MAX_API_KEYS];
    /* Each key's priority class (--api-key-file's `batch` / `priority=N`;
     * 0: interactive): its requests' default and the most urgent class they
     * may ask for (req.priority = max(the body's priority, this)). */
    int api_key_priority[SERVER_MAX_API_KEYS];
    int n_api_keys;
    char api_key_file_buf[8192]; /* holds the keys read from --api-key-file          */
    int n_threads;            /* -t; default: online CPUs                             */
    int n_ctx;                /* --ctx positions per sequence; 0 = model's training   */
    int block_tokens;         /* --block-tokens KV block size; default 16             */
    size_t max_body_bytes;    /* --max-body request body limit; default 8 MiB         */
    int max_connections;      /* --max-connections; default 1024                      */
    int max_conns_per_ip;     /* --max-conns-per-ip; 0 (default): 64 when --host is not
                                 a loopback address, no cap of its own on loopback   */
    size_t max_body_total;    /* --max-body-total: bodies held at once; 0: 4 x max-body */
    int timeout_s;            /* --timeout: keep-alive idle seconds; default 60       */
    int header_timeout_s;     /* --header-timeout: seconds for a request's headers; 10 */
    int body_timeout_s;       /* --body-timeout: seconds for a body after its headers; 60 */
    size_t grammar_cache_bytes; /* --grammar-cache: the cached grammars' mask and DFA
                                 caches together; 0: 1 GiB (constrain.h)          */
    size_t responses_store_bytes; /* --responses-store: bound of the Responses store;
                                 0: 256 MiB (apis.h)                              */
    const char *allowed_hosts; /* --allowed-hosts: comma list of Host names accepted
                                 besides localhost and the bound address (DNS
                                 rebinding check, routes.c); NULL: none            */
    bool check;               /* --check: verify pool and tree after every step       */
    const char *ready_file;   /* --ready-file: write the bound port here once serving */
    int step_delay_us;        /* --step-delay-us: testing, slows every engine step     */
    int mask_spin_us;         /* --mask-spin-us: testing, every grammar mask spins so long */
    int load_delay_ms;        /* --load-delay-ms: testing, slows every model load      */
    const char *chat_template_file; /* --chat-template-file: overrides the model's   */
    const char *tool_format;  /* --tool-format: "auto" (from the template) or a name   */
    /* --cors-origin, repeatable: each an origin, a comma list of them, or "*"
     * (strings in argv); none: no CORS headers (http.h) */
    const char *cors_origins[SERVER_MAX_CORS];
    int n_cors_origins;
    int shutdown_timeout_s;   /* --shutdown-timeout: drain time on SIGINT/SIGTERM; 10 */
    int stall_timeout_s;      /* --stall-timeout: cancel a request whose client reads
                                 none of its output this long (engine_opts); 30     */
    int kv_policy;            /* --kv-policy: ENGINE_KV_AGENT (default) or _LRU       */
    int kv_ttl_max_s;         /* --kv-ttl-max: a pin's TTL cap in seconds (60)         */
    const char *kv_disk_dir;  /* --kv-disk: the KV disk tier's directory; NULL = off  */
    size_t kv_disk_max_bytes; /* --kv-disk-size: its size cap; 0 = none               */
    bool no_webui;            /* --no-webui: no chat page at / (404 there)            */
    const char *log_file;     /* --log-file: the log also goes to this file           */
    unsigned noop_flags;      /* llama-server flags given that change nothing here
                                 (SERVER_NOOP_*): server_main says so once each     */
    int spec;                 /* --spec: the drafter (draft_kind; docs/server.md)     */
    bool spec_given;          /* --spec was given (--draft-model alone: --spec draft) */
    int spec_max;             /* --spec-max: draft tokens per step per sequence (8)   */
    const char *draft_model;  /* --draft-model: --spec draft's model file, or NULL    */
    double spec_token_cost;   /* --spec-token-cost: fixed (testing); 0 = learnt       */
} server_opts;

/* The least default KV pool (the default before it followed the context). */
#define SERVER_KV_MIN_BYTES ((size_t)256 << 20)

/* llama-server flags accepted as no-ops (bits of server_opts.noop_flags). */
enum { SERVER_NOOP_JINJA = 1, SERVER_NOOP_FLASH_ATTN = 2, SERVER_NOOP_METRICS = 4 };

/* Used when no -m is given (relative to the working directory). */
#define SERVER_DEFAULT_MODEL "models/stories260K.gguf"

/* Whether a --host value is a loopback address (127.0.0.0/8, ::1,
 * localhost; NULL or "" is the default 127.0.0.1). */
bool server_host_is_loopback(const char *host);

/* Fills *o with the defaults above. */
void server_opts_default(server_opts *o);

/* Parses the arguments after "serve" (argv[0] is the first flag). Strings in
 * *o point into argv, except api_key read from a file (copied into
 * o->api_key_file_buf). Returns 0, 1 when --help was printed, or ERR_INVALID
 * with a message naming the flag. */
int server_parse_args(int argc, char **argv, server_opts *o, err_t *e);

/* Loads `path` as the draft model of the model whose tokenizer is tk
 * (named model_name in messages): the file must load as a decoder and its
 * vocabulary spell every token as tk does (tok_same_vocab). 0, or <0 with
 * e naming the file and what differs. Used by serve and run. */
int server_load_draft(const char *path, const tokenizer *tk, const char *model_name, model **out, err_t *e);


/* Runs the server until SIGINT or SIGTERM, then shuts down gracefully: no
 * new connections, new requests on open ones get 503, running requests have
 * --shutdown-timeout seconds to finish, what remains is cancelled (a stream
 * gets an error event and its end, a whole answer a 503); a second signal
 * cancels at once. Returns 0 after the shutdown, or a negative ERR_* (port in
 * use -- checked before the model loads --, model load failure ...) with the
 * reason logged in one line. */
int server_main(const server_opts *o);

#endif
