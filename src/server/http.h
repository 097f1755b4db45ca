/*
 * http.h — the HTTP/1.1 layer: libmicrohttpd with one event-driven I/O
 * thread for every socket, a pool of handler threads, a body size limit,
 * and a synchronous handler per request that may block (waiting for the
 * engine) and may answer with a pulled stream (SSE).
 *
 * Place in the flow: the top of server/. libmicrohttpd parses HTTP; this file
 * collects the body, enforces the limit (413), calls the handler on a
 * handler thread, and turns its answer into an MHD response.
 *
 *   I/O thread:     headers ─▶ body chunks (<= max_body_bytes) ─▶ suspend
 *   handler thread: handler(x) ─▶ http_reply(...)                 (plain)
 *                              └▶ http_reply_stream(x, fn)        (chunked;
 *                     fn runs on a handler thread into a bounded buffer
 *                     that the I/O thread sends from)
 *
 * An idle or slow socket costs a descriptor and a few KiB, no thread; a
 * request holds a handler thread only while its handler runs or its stream
 * producer has something to do (not while it waits for a client that does
 * not read). Client disconnects are detected by polling the socket
 * (http_client_gone) while a handler or a stream producer waits, and by
 * MHD's completion callback; both reach the handler's cancel hook.
 *
 * Connection hygiene (decisions in docs/server.md "Limits and security"):
 *  - a request's headers must be complete header_timeout_s after the
 *    connection opened, or after its request line arrived on a kept-alive
 *    connection; its body must then arrive at HTTP_MIN_BODY_RATE on average
 *    after a grace of header_timeout_s; a kept-alive connection idle for
 *    timeout_s is closed. These deadlines are absolute (a byte every few
 *    seconds does not extend them); past one, a connection in the middle of
 *    a request is answered 408 (Connection: close) and closed, an idle
 *    kept-alive one just closed;
 *  - at most max_conns_per_ip connections per client address (more are
 *    closed at once), every loopback address counting as one and IPv6
 *    addresses by their /64;
 *  - at max_connections a new connection closes the least recently active
 *    one that waits for a request (kept-alive, or nothing sent yet), or
 *    itself when every one is in a request; a connection ends after
 *    HTTP_MAX_REQUESTS_PER_CONN requests;
 *  - request smuggling: conflicting Content-Length headers, Content-Length
 *    with Transfer-Encoding, or a transfer coding other than chunked are
 *    refused (400 / 501) from the headers, and the connection closed;
 *  - body memory: the bodies being received and held across all connections
 *    are bounded by max_body_total (503 beyond); a handler releases its body
 *    once parsed (http_body_release);
 *  - http_config.precheck decides every request (but OPTIONS, which takes
 *    no body) from its headers alone (the API key, the Host, the
 *    Content-Type) before any body byte is read or counted: a refused
 *    request's body above HTTP_EARLY_CHECK_BYTES, or of unknown size, is
 *    not read (the answer closes the connection), a smaller one is read and
 *    dropped, then answered. http_body_announced tells the precheck whether
 *    a body comes;
 *  - "Expect: 100-continue" with a Content-Length above max_body_bytes is
 *    answered 413 before the 100 (the body is never sent).
 *
 * Also here, because they hold for every route alike:
 *  - CORS (http_config.cors_origins): an OPTIONS request is a preflight and is
 *    answered here (204, never reaches the handler, so never needs an API
 *    key); every response to an allowed Origin, streams and errors included,
 *    carries Access-Control-Allow-Origin and Vary: Origin. With no origins
 *    configured no CORS header is ever sent (same-origin pages need none).
 *  - Draining (http_drain): the listening socket is closed, requests that
 *    still arrive on open connections get 503 here, and http_wait_idle waits
 *    for the requests that were already in the handler (or streaming).
 *
 *   running ──http_drain──▶ draining (new: 503; old: run on) ──http_stop──▶ gone
 */
#ifndef KVLOOM_HTTP_H
#define KVLOOM_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/base.h"
#include "../base/sbuf.h"

typedef struct http_exchange http_exchange;
typedef struct http_server http_server;


/* Called on a handler thread once the whole body is in. It must answer
 * with exactly one http_reply* call; it may block (the connection waits). */
typedef void (*http_handler_fn)(void *ctx, http_exchange *x);

/* A stream producer: appends the next bytes to `out`, blocking briefly as
 * needed (tens of ms: the caller checks for a disconnect between calls;
 * appending nothing is fine). Runs on a handler thread, never two calls at
 * once. Returns 1 while more will follow, 0 when this was the end, -1 to
 * abort the connection. */
typedef int (*http_stream_fn)(void *sctx, sbuf *out);
/* Told when the stream's producer stops because more than
 * http_config.park_bytes wait for its client, or its client's kernel took
 * none of them for http_config.park_idle_ms (blocked true), and when it
 * goes on (false): the generation behind it should stop at once rather than
 * wait for a timer. Runs on a handler thread; must not block. */
typedef void (*http_stream_block_fn)(void *sctx, bool blocked);
/* Frees the producer's state, after its last call; `completed` is false
 * when the client went away or the connection failed before the end. Runs
 * on a handler thread or the I/O thread: it must not block. */
typedef void (*http_stream_free_fn)(void *sctx, bool completed);

/* Called once a request's headers are complete (see the top of this file):
 * returns true to go on, or false after answering with http_reply. Runs on
 * the I/O thread (so it must not block); the body is not available. */
typedef bool (*http_precheck_fn)(void *ctx, http_exchange *x);

/* Writes the JSON body of an error that this layer answers itself (413,
 * 408, 503 over budget or draining, 400/501 framing, 500 no answer) to a
 * request for `path`, in the shape of the API that path belongs to (an
 * Ollama or Anthropic client cannot read an OpenAI error object). msg is plain text, code
 * an identifier or NULL. Returns the length written (< cap, NUL-terminated),
 * 0 to fall back to the OpenAI shape. Runs on the I/O thread and the reaper:
 * it must not block. */
typedef size_t (*http_error_fn)(const char *path, int status, const char *code, const char *msg, char *out,
                                size_t cap);

/* The pace a body must keep on average after the grace period, bytes/s. */
#define HTTP_MIN_BODY_RATE (64 * 1024)
/* Bodies up to this size are read (and dropped) before a precheck answer,
 * so that a client still sending reliably reads it. */
#define HTTP_EARLY_CHECK_BYTES (64 * 1024)
/* A connection on which nothing can be sent or received for this long is
 * closed (a client that stopped reading; MHD's own timeout, reset by every
 * byte). Not a limit on a handler's time. */
#define HTTP_STALL_TIMEOUT_S 600
/* A stream's producer stops (its handler thread is given back) while this
 * many bytes wait for a client that does not read; it goes on once half of
 * them are sent. */
#define HTTP_STREAM_BUFFER (64 * 1024)
/* A kept-alive connection is closed after this many requests (the answer
 * to the last says Connection: close): a client cannot pin a slot with one
 * connection forever. */
#define HTTP_MAX_REQUESTS_PER_CONN 1000
/* Connections accepted past max_connections, each only long enough to
 * close the least recently active idle one (or itself, when none is). */
#define HTTP_CONN_RESERVE 16
/* A connection's memory beside its stream buffer (HTTP_STREAM_BUFFER): the
 * memory pool libmicrohttpd gives each (32 KiB by default: headers, the
 * request line) and ours (the exchange, its tracking). The memory budget
 * counts max_connections x (both). */
#define HTTP_CONN_MEMORY (36 * 1024)
/* A handler thread with no work for this long exits (seconds). */
#define HTTP_WORKER_IDLE_S 10
/* A stream's socket send buffer (SO_SNDBUF; the kernel doubles it), fixed
 * so that what a client that does not read holds in the kernel is bounded
 * too (Linux would grow it to 4 MiB). */
#define HTTP_STREAM_SNDBUF (128 * 1024)
/* park_idle_ms by the client's receive window (Linux, policy_rwnd in
 * sched/policy.h): a client whose window shrank by this much while it read
 * nothing for park_idle_ms is idle although its buffer still takes bytes. A
 * reader's window can dip below its first promise by its unread and
 * not-yet-freed bytes (62 KB measured on loopback); a non-reader's window
 * shrinks by >= 0.6 of each byte sent, so it is found after ~400 KB, not
 * once its buffer (up to tcp_rmem's maximum, 32 MiB here) is full. */
#define HTTP_PARK_WINDOW_SHRINK (256 * 1024)

typedef struct http_config {
    const char *host;       /* numeric IPv4/IPv6 address to bind ("127.0.0.1")  */
    int port;               /* 0: any free port (see http_port)                  */
    size_t max_body_bytes;  /* larger bodies get 413                             */
    size_t max_body_total;  /* body bytes held across all connections; more get
                               503 (0: 4 x max_body_bytes)                      */
    int max_connections;    /* simultaneous connections; more are closed at once
                               (0: 1024)                                        */
    int max_handlers;       /* handler threads: requests in a handler or with a
                               stream producer at work at once; more wait for
                               one (0: 64)                                      */
    int max_conns_per_ip;   /* per client address; 0: no cap of its own         */
    int timeout_s;          /* a kept-alive connection idle this long is closed
                               (0: 60)                                          */
    int header_timeout_s;   /* headers complete within this; body grace, and the
                               longest pause inside a body (0: 10)              */
    int body_timeout_s;     /* a body complete this long after its headers, at
                               most, whatever its size and pace (0: 60)         */
    int stall_timeout_s;    /* a stream whose client read none of a full buffer
                               for this long is closed (its free function sees
                               completed false); 0: MHD's own timeout only    */
    size_t park_bytes;      /* a stream's producer stops (and its block_fn is
                               told) while more than this many bytes wait for
                               its client: its buffer plus the socket's send
                               queue (SIOCOUTQ); 0: only at HTTP_STREAM_BUFFER */
    int park_idle_ms;       /* with park_bytes: a stream whose client's kernel
                               acknowledged none of the bytes its socket holds
                               for this long (the client's receive buffer is
                               full: it reads nothing), or whose receive
                               window shows it read nothing for this long
                               (HTTP_PARK_WINDOW_SHRINK), stops as at
                               park_bytes, whatever the bytes; 0: off (Linux
                               only)                                            */
    http_precheck_fn precheck; /* NULL: none; called with the handler's ctx      */
    http_error_fn error_body;  /* NULL: errors in OpenAI's shape only            */
    int listen_fd;          /* > 0: a socket from http_listen, owned by the server
                               from http_start on; otherwise http_start binds
                               host:port itself                                  */
    /* Origins allowed to call from a browser page of another origin: each
     * entry an origin ("http://localhost:3000"), a comma list of them, or
     * "*" (any). Copied by http_start. NULL / 0: no CORS headers at all. */
    const char *const *cors_origins;
    int n_cors_origins;
} http_config;

/* Binds host:port (numeric IPv4/IPv6; port 0 = any free port) and listens.
 * Meant to run before slow start-up work, so that a taken port fails at once.
 * Errors: ERR_INVALID (bad host or port), ERR_IO whose message names the
 * cause, e.g. "port 8080 is in use". */
int http_listen(const char *host, int port, int *fd_out, err_t *e);

/* Starts serving (binding first unless c->listen_fd is set). Errors: ERR_IO
 * (bind failed, named); a given listen_fd is closed on failure too. */
int http_start(const http_config *c, http_handler_fn fn, void *ctx, http_server **out, err_t *e);
/* The port actually bound. */
int http_port(const http_server *s);
/* Begins a graceful stop (main thread): closes the listening socket (new
 * connections are refused), and from now on every request that reaches the
 * end of its upload is answered 503 "the server is shutting down" with
 * Connection: close, without calling the handler. Returns the number of
 * requests in flight (in the handler or streaming). Idempotent. */
int http_drain(http_server *s);
/* Waits until none of the requests dispatched before http_drain is still in
 * flight, or timeout_ms passed; returns how many still are. */
int http_wait_idle(http_server *s, int timeout_ms);
/* Stops dispatching (requests not yet handed to a handler get 503), waits
 * for the handlers and producers at work, then closes every connection. */
void http_stop(http_server *s);

/* ---- inside a handler ---- */
const char *http_method(const http_exchange *x);
const char *http_path(const http_exchange *x);
/* A request header (case-insensitive name) or NULL. */
const char *http_header(const http_exchange *x, const char *name);
/* A query-string argument (?name=value, percent-decoded), or NULL. */
const char *http_query(const http_exchange *x, const char *name);
const char *http_body(const http_exchange *x, size_t *n);
/* Whether the request has a body: a Content-Length above 0, or chunked.
 * Valid in the precheck (before the body is read) too. */
bool http_body_announced(const http_exchange *x);
/* Frees the body (after parsing it) and gives its bytes back to the
 * max_body_total budget; http_body is "" afterwards. */
void http_body_release(http_exchange *x);
/* The path for a log line: bytes below 0x20, 0x7f and above, and '\\' as
 * \xNN, at most 200 input bytes (valid until the exchange ends). */
const char *http_path_log(http_exchange *x);
/* The method, escaped the same way. */
const char *http_method_log(http_exchange *x);
/* The reason of an error answer, for the request's log line (every 4xx is
 * logged with it): the API error helpers call it with their message. Copied,
 * escaped as http_path_log, at most 240 input bytes; the last call wins. */
void http_set_reason(http_exchange *x, const char *msg);
/* That reason, or "" when none was set. */
const char *http_reason(const http_exchange *x);
/* The HTTP layer's state for /metrics (any handler may read it). */
typedef struct http_stats {
    size_t body_bytes;                    /* request bodies held now       */
    size_t stream_bytes;                  /* streams' buffers now (output
                                             produced, not yet sent; at most
                                             about HTTP_STREAM_BUFFER each) */
    unsigned long long n_deadline_closed; /* connections closed past their
                                             header / body / idle deadline */
    unsigned long long n_culled;          /* idle connections closed to make
                                             room for new ones             */
    unsigned long long n_refused;         /* new connections closed at once:
                                             their address's cap, or every
                                             slot in a request             */
    unsigned long long n_window_idle;     /* streams stopped because their
                                             client's receive window showed
                                             it read nothing (park_idle_ms) */
    int n_connections;                    /* open now                      */
    int n_workers, n_workers_peak;        /* handler threads alive now, and
                                             the most at once so far        */
    size_t max_body_total;                /* the bodies' bound (effective)  */
    int max_connections;                  /* connections at most, with the
                                             reserve (HTTP_CONN_RESERVE)   */
} http_stats;
void http_get_stats(const http_exchange *x, http_stats *out);
/* The client's address as the per-address cap counts it (16 bytes: IPv4
 * mapped into IPv6, IPv6 cut to its /64, every loopback address one). */
void http_peer_key(http_exchange *x, unsigned char out[16]);
/* True once the peer has closed its end or the socket failed. Cheap (poll). */
bool http_client_gone(http_exchange *x);

/* Adds a header to the answer that follows (before http_reply*); both
 * strings are copied. At most HTTP_MAX_EXTRA_HEADERS; more are dropped
 * (logged). */
#define HTTP_MAX_EXTRA_HEADERS 8
void http_add_header(http_exchange *x, const char *name, const char *value);

/* Answers with a complete body (copied). `extra_header`/`extra_value` may be
 * NULL (used for Retry-After); headers from http_add_header and the CORS
 * headers are added as well. */
void http_reply(http_exchange *x, int status, const char *content_type, const char *body, size_t n,
                const char *extra_header, const char *extra_value);
/* Answers with a stream: fn is called until it returns 0 or -1; free_fn runs
 * exactly once afterwards (also when the reply is never sent); block_fn
 * (NULL: none) as http_stream_block_fn says. Chunked transfer encoding with
 * `content_type`. */
void http_reply_stream(http_exchange *x, int status, const char *content_type, http_stream_fn fn,
                       http_stream_free_fn free_fn, http_stream_block_fn block_fn, void *sctx);
/* The status the handler answered with (0 before). */
int http_status(const http_exchange *x);

#endif
