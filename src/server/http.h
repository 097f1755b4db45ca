/*
 * http.h — the HTTP/1.1 layer: libmicrohttpd with one thread per connection,
 * a body size limit, and a synchronous handler per request that may block
 * (waiting for the engine) and may answer with a pulled stream (SSE).
 *
 * Place in the flow: the top of server/. libmicrohttpd parses HTTP; this file
 * collects the body, enforces the limit (413), calls the handler on the
 * connection's thread, and turns its answer into an MHD response.
 *
 *   connection thread: headers ─▶ body chunks (<= max_body_bytes)
 *                      ─▶ handler(x) ─▶ http_reply(...)          (plain)
 *                                   └▶ http_reply_stream(x, fn)  (chunked;
 *                          fn is pulled by MHD on the same thread until done)
 *
 * Client disconnects are detected by polling the socket (http_client_gone)
 * while a handler or a stream producer waits, and by MHD's completion
 * callback; both reach the handler's cancel hook.
 */
#ifndef KVLOOM_HTTP_H
#define KVLOOM_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/base.h"

typedef struct http_exchange http_exchange;
typedef struct http_server http_server;

/* A growable byte buffer for responses. */
typedef struct http_buf {
    char *p;
    size_t n, cap;
} http_buf;
void http_buf_add(http_buf *b, const void *data, size_t n);
void http_buf_printf(http_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void http_buf_free(http_buf *b);

/* Called on the connection thread once the whole body is in. It must answer
 * with exactly one http_reply* call. */
typedef void (*http_handler_fn)(void *ctx, http_exchange *x);

/* A stream producer: appends the next bytes to `out`, blocking as needed
 * (but polling http_client_gone). Returns 1 while more will follow, 0 when
 * this was the end, -1 to abort the connection. */
typedef int (*http_stream_fn)(void *sctx, http_buf *out);
/* Frees the producer's state; `completed` is false when the client went away
 * or the connection failed before the end. */
typedef void (*http_stream_free_fn)(void *sctx, bool completed);

typedef struct http_config {
    const char *host;       /* numeric IPv4/IPv6 address to bind ("127.0.0.1")  */
    int port;               /* 0: any free port (see http_port)                  */
    size_t max_body_bytes;  /* larger bodies get 413                             */
    int max_connections;    /* simultaneous connections (threads)                */
    int timeout_s;          /* idle connection timeout                           */
} http_config;

/* Starts listening and serving. Errors: ERR_IO (bind failed, named). */
int http_start(const http_config *c, http_handler_fn fn, void *ctx, http_server **out, err_t *e);
/* The port actually bound. */
int http_port(const http_server *s);
/* Stops accepting, closes connections and waits for their threads. */
void http_stop(http_server *s);

/* ---- inside a handler ---- */
const char *http_method(const http_exchange *x);
const char *http_path(const http_exchange *x);
/* A request header (case-insensitive name) or NULL. */
const char *http_header(const http_exchange *x, const char *name);
const char *http_body(const http_exchange *x, size_t *n);
/* True once the peer has closed its end or the socket failed. Cheap (poll). */
bool http_client_gone(http_exchange *x);

/* Answers with a complete body (copied). `extra_header`/`extra_value` may be
 * NULL (used for Retry-After). */
void http_reply(http_exchange *x, int status, const char *content_type, const char *body, size_t n,
                const char *extra_header, const char *extra_value);
/* Answers with a stream: fn is called until it returns 0 or -1; free_fn runs
 * exactly once afterwards (also when the reply is never sent). Chunked
 * transfer encoding with `content_type`. */
void http_reply_stream(http_exchange *x, int status, const char *content_type, http_stream_fn fn,
                       http_stream_free_fn free_fn, void *sctx);
/* The status the handler answered with (0 before). */
int http_status(const http_exchange *x);

#endif
