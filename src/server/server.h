/*
 * server.h — `kvloom serve`: the OpenAI-compatible HTTP server.
 *
 * Place in the flow: the top of the request path. server_main loads the model
 * and tokenizer, starts the engine thread (sched/engine.h) and the HTTP
 * threads (http.h), and serves until SIGINT/SIGTERM:
 *
 *   POST /v1/completions, /v1/chat/completions   (JSON or SSE)
 *   GET  /v1/models, /health, /metrics
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

typedef struct server_opts {
    const char *model_path;   /* -m; NULL: SERVER_DEFAULT_MODEL                       */
    const char *alias;        /* --alias: model id in the API; NULL: file base name   */
    const char *host;         /* --host, numeric address; default "127.0.0.1"         */
    int port;                 /* --port; default 8080; 0 = any free port              */
    size_t kv_mem_bytes;      /* --kv-mem (accepts K/M/G suffixes); default 256 MiB   */
    int max_batch_tokens;     /* --max-batch-tokens; default 512                      */
    int max_running;          /* --max-running sequences per batch; default 64        */
    int max_queue;            /* --max-queue waiting requests before 429; default 256 */
    const char *api_key;      /* --api-key, or the first line of --api-key-file       */
    char api_key_file_buf[512]; /* holds the key read from --api-key-file            */
    int n_threads;            /* -t; default: online CPUs                             */
    int n_ctx;                /* --ctx positions per sequence; 0 = model's training   */
    int block_tokens;         /* --block-tokens KV block size; default 16             */
    size_t max_body_bytes;    /* --max-body request body limit; default 8 MiB         */
    int max_connections;      /* --max-connections; default 256                       */
    bool check;               /* --check: verify pool and tree after every step       */
    const char *ready_file;   /* --ready-file: write the bound port here once serving */
    int step_delay_us;        /* --step-delay-us: testing, slows every engine step     */
    const char *chat_template_file; /* --chat-template-file: overrides the model's   */
    const char *tool_format;  /* --tool-format: "auto" (from the template) or a name   */
} server_opts;

/* Used when no -m is given (relative to the working directory). */
#define SERVER_DEFAULT_MODEL "models/stories260K.gguf"

/* Fills *o with the defaults above. */
void server_opts_default(server_opts *o);

/* Parses the arguments after "serve" (argv[0] is the first flag). Strings in
 * *o point into argv, except api_key read from a file (copied into
 * o->api_key_file_buf). Returns 0, 1 when --help was printed, or ERR_INVALID
 * with a message naming the flag. */
int server_parse_args(int argc, char **argv, server_opts *o, err_t *e);

/* Usage text of the serve flags. */
const char *server_usage(void);

/* Runs the server until SIGINT or SIGTERM. Returns 0 after a clean shutdown,
 * or a negative ERR_* (model load failure, port in use ...) with the reason
 * logged. */
int server_main(const server_opts *o);

#endif
