/*
 * http.c — libmicrohttpd glue (contract in http.h): an event-driven I/O
 * thread, handler threads, body collection under a size limit, pulled
 * streams through a bounded buffer, disconnect detection.
 *
 * Why this shape: a handler blocks for seconds (waiting for generated
 * tokens) and a stream producer blocks between tokens, so they need threads
 * of their own; a socket that only sends headers, a body or nothing at all
 * does not. libmicrohttpd runs every socket from one I/O thread
 * (MHD_USE_POLL | MHD_USE_INTERNAL_POLLING_THREAD): an idle or dribbling
 * connection costs a descriptor and MHD's per-connection state, no thread.
 * poll(), not epoll: MHD 0.9.75's edge-triggered epoll loop misses the end
 * of input of some connections that close in the middle of an upload when
 * many do at once (they sit in CLOSE_WAIT until the body deadline;
 * docs/decisions.md, 2026-11-26); level-triggered poll() sees every one. poll() scans every connection on each wakeup, which is cheap at
 * --max-connections' scale (1024 by default).
 * Once a request's body is complete the connection is suspended
 * (MHD_suspend_connection) and the exchange handed to a handler thread
 * (the "workers": started on demand up to http_config.max_handlers, each
 * exiting after HTTP_WORKER_IDLE_S without work; more exchanges wait in a
 * FIFO). The handler runs unchanged blocking
 * code; its answer is stored, the connection resumed, and MHD calls
 * on_access again, which queues it.
 *
 *   I/O thread:   headers ─▶ body chunks ─▶ on_access(end) ─▶ suspend ─┐
 *                                                                      ▼
 *   worker:        handler(x) ─▶ http_reply: x->resp ─▶ resume ─▶ [producer]
 *                                                                      │
 *   I/O thread:    on_access: MHD_queue_response(x->resp) ◀────────────┘
 *
 * Streams: the producer runs on a worker and appends to the stream's buffer
 * (at most HTTP_STREAM_BUFFER bytes; then it "parks": the worker goes back
 * to the pool, so a client that does not read holds no thread and the
 * engine never waits for it). MHD's content reader takes bytes from the
 * buffer; when it is empty the reader suspends the connection and returns
 * 0 (returning 0 without suspending would make MHD 0.9.75 call it again at
 * once: a busy loop), and the producer resumes it when bytes arrive. When
 * the reader has drained a parked buffer below half, it hands the producer
 * to a worker again. While the reader is suspended MHD does not watch the
 * socket, so the producer polls it (http_client_gone's test) whenever it
 * produced nothing. Locks: MHD's response mutex ─▶ stream mutex ─▶ the pool
 * mutex or MHD's own (suspend/resume), never the other way round.
 *
 *   producer ── bytes ──▶ [ buffer <= HTTP_STREAM_BUFFER ] ──▶ reader ──▶ MHD
 *      ▲ parked when full                        │ empty: suspend; producer resumes
 *      └──────────── drained below half ─────────┘
 *
 * Deadlines: every connection has an absolute deadline for its next step
 * (headers, body pace, keep-alive idle; none while a handler runs), kept in
 * a list (conn_track, from MHD's connection notifications) that a reaper
 * thread scans every 200 ms. A connection past its deadline in the middle
 * of a request (its first request, a request line seen, or a body) is sent
 * "408 Request Timeout" with Connection: close, written by the reaper
 * itself: MHD offers no way to answer a request whose headers are
 * incomplete, and in these states MHD has not written anything for the
 * request (at most an interim 100 Continue), so the bytes cannot interleave
 * with an answer. Then its write side is shut down; the read side a second
 * later, which makes MHD close it. An idle kept-alive connection is just
 * closed (a 408 there would reach a client that sent nothing). MHD closes a
 * socket only after its CLOSED notification, which removes it from the list
 * under the same mutex: the reaper never touches a reused descriptor.
 *
 *   accepted ─(headers due)─▶ on_access #1 ─(body pace)─▶ handler (none)
 *       ▲                                                    │
 *       └── request line (headers due) ◀── idle (timeout_s) ◀┘ on_completed
 *
 * Invariants: a handler answers exactly once; a stream's free function runs
 * exactly once, after the producer stopped and MHD released the response
 * (whichever comes last calls it); nothing here exits or asserts on request
 * bytes; n_inflight counts exactly the exchanges that were handed to the
 * handler and have not completed (MHD's completion callback), so that a
 * drain knows what it waits for; no connection is suspended when
 * MHD_stop_daemon runs (MHD 0.9.75 panics then): http_stop first stops
 * dispatching and waits until the workers exited, each of which resumed what it
 * suspended.
 *
 * CORS decisions, in one place (http.h): a preflight is any OPTIONS request;
 * an allowed Origin is echoed (never a literal "*", which would not do for a
 * page that sends credentials) with Vary: Origin; the preflight allows the
 * headers the browser asks for (an SDK adds its own x-... headers) plus
 * Authorization and Content-Type.
 */
#include "http.h"

#include "../sched/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/sockios.h> /* SIOCOUTQ */
#include <linux/tcp.h>     /* TCP_INFO: tcpi_bytes_acked */
#endif

enum { TRACK_IDLE, TRACK_REQUEST, TRACK_STALL, TRACK_KEEPALIVE };

/* A client address as the per-address cap counts it: IPv4 as ::ffff:a.b.c.d,
 * IPv6 cut to its /64 (one host's usual allocation), and every loopback
 * address (127.0.0.0/8, ::1, ::ffff:127.x) the same one. */
typedef struct addr_key {
    unsigned char b[16];
} addr_key;

/* One open connection, for the reaper: its socket and the absolute time by
 * which it must have made its next step (0: none, while a handler runs). */
typedef struct conn_track {
    struct conn_track *prev, *next;
    int fd;
    int64_t deadline_ns;
    int in_request;  /* TRACK_IDLE: answered or streaming, a deadline just
                        closes; TRACK_KEEPALIVE: kept-alive between requests
                        (idle since active_ns), the same; TRACK_REQUEST:
                        bytes of a request came (or a first one is due): a
                        deadline answers 408; TRACK_STALL: a stream's client
                        reads nothing: a deadline closes */
    int reaped;      /* 0; 1: 408 sent, write side shut; 2: closed       */
    char body_408[320]; /* the 408's body in the request's API shape, once
                           its path is known (else OpenAI's)              */
    int64_t active_ns;   /* opened, or its last request completed       */
    bool request_line;   /* a request line arrived since active_ns      */
    unsigned n_requests; /* requests begun on it (I/O thread only)      */
    addr_key addr;
} conn_track;

/* A unit of work for a handler thread: an exchange to handle or a stream
 * whose producer is to run. */
typedef struct work {
    struct work *next;
    struct http_exchange *x;
    struct http_stream *st;
} work;

struct http_server {
    struct MHD_Daemon *d;
    http_config c;
    http_handler_fn fn;
    void *ctx;
    int port;
    char *cors;          /* the allowed origins as one comma list, or NULL   */
    pthread_mutex_t mu;  /* guards the four below                           */
    pthread_cond_t idle; /* signalled when n_inflight drops                 */
    bool draining;
    int n_inflight;      /* exchanges in the handler or streaming            */
    size_t body_bytes;   /* bodies buffered now (max_body_total)             */
    atomic_size_t stream_bytes; /* streams' buffers (http_stream.buf, capacity) */
    atomic_ullong n_window_idle; /* streams stopped by their client's window   */
    /* the reaper: every open connection and its deadline */
    pthread_mutex_t track_mu; /* guards the list, the deadlines, reaper_stop */
    pthread_cond_t track_cv;
    conn_track *tracks;
    bool reaper_stop, reaper_started;
    pthread_t reaper;
    unsigned long long n_reaped; /* connections closed past a deadline     */
    int n_tracks;                /* open connections (the list's length)   */
    unsigned long long n_culled; /* idle ones closed to make room          */
    unsigned long long n_refused; /* refused: full, or their address's cap */
    /* the handler threads */
    pthread_mutex_t pool_mu;  /* guards the fields below                   */
    pthread_cond_t pool_cv;   /* work queued, or pool_stop                 */
    work *q_head, *q_tail;
    int n_queued;             /* in the queue                              */
    int n_workers, n_idle;    /* alive (detached); waiting for work        */
    int n_workers_peak;       /* the most alive at once (the memory budget) */
    pthread_cond_t pool_exit; /* a worker exited (http_stop waits for all) */
    bool pool_stop;           /* http_stop: nothing more is dispatched     */
};

struct http_exchange {
    http_server *srv;
    struct MHD_Connection *conn;
    char method[16];
    char *path;
    sbuf body;
    size_t body_reserved; /* of srv->body_bytes, held by this body          */
    bool too_large;
    bool over_budget;     /* the max_body_total budget was full: 503        */
    bool closing;         /* answered before the body: Connection: close    */
    bool hold;            /* answers go to `held` (see there)               */
    bool chunked;         /* Transfer-Encoding: chunked                     */
    int64_t t_headers;    /* when the headers were complete                 */
    int64_t t_last;       /* when the last body bytes came (0: none yet)    */
    unsigned long long expect_bytes; /* Content-Length, or 0               */
    size_t n_received;    /* body bytes received (kept or dropped)          */
    size_t n_dropped;  /* body bytes discarded after the limit */
    char *path_log;       /* http_path_log's copy                           */
    char *reason;         /* http_set_reason's copy, or NULL                */
    char method_log[80];
    bool answered;
    bool gone;
    bool inflight;       /* counted in srv->n_inflight                      */
    bool dispatched;     /* handed to a worker (the connection suspended):
                            answers are stored in resp, not queued          */
    struct MHD_Response *resp;   /* the stored answer, queued on resume     */
    struct MHD_Response *held;   /* an answer decided from the headers, sent
                                    once the (small) body was read and
                                    dropped: a client still sending then
                                    reliably reads it                        */
    struct http_stream *stream;  /* its producer, started after the resume  */
    work job;
    int status;
    int n_extra;
    char *extra[HTTP_MAX_EXTRA_HEADERS][2];
};

/* A stream between its producer (a worker) and MHD's content reader (the
 * I/O thread); everything below mu is guarded by it. */
typedef struct http_stream {
    http_server *srv;
    struct MHD_Connection *conn; /* valid until `released`                */
    int fd;                      /* the connection's socket, idem          */
    http_stream_fn fn;
    http_stream_free_fn free_fn;
    http_stream_block_fn block_fn; /* NULL: none                         */
    void *sctx;
    work job;
    pthread_mutex_t mu;
    sbuf buf;        /* produced, not yet taken: [off, n)               */
    size_t off;
    bool active;         /* the producer is queued or running on a worker   */
    bool reader_waiting; /* the reader suspended the connection (empty)     */
    bool stall_armed;    /* its connection has a stall deadline (stall_arm)  */
    bool done;           /* the producer returned 0                         */
    bool failed;         /* it returned -1, the client went away, or stop   */
    bool delivered;      /* the reader returned the end of the stream       */
    bool released;       /* MHD freed the response (connection over)        */
    bool blocked;        /* stopped at park_bytes; block_fn told (producer) */
    int sndbuf;          /* SO_SNDBUF as set at the start                    */
    bool squeezed;       /* SO_SNDBUF cut to the minimum (sock_idle)         */
    uint64_t acked;      /* the socket's bytes acknowledged, last seen       */
    int64_t acked_ns;    /* when that count last moved (or the queue was empty) */
    policy_rwnd rwnd;    /* the client's receive window, as sock_idle saw it  */
    bool rwnd_idle;      /* stopped by the window (sock_idle): probed         */
} http_stream;

static void *worker_main(void *arg);
static void track_answered(http_server *s, struct MHD_Connection *c);
static void run_handler(http_exchange *x);
static void produce(http_stream *s);

/* ---- exchange accessors ---- */

const char *http_method(const http_exchange *x) { return x->method; }
const char *http_path(const http_exchange *x) { return x->path; }
int http_status(const http_exchange *x) { return x->status; }

const char *http_header(const http_exchange *x, const char *name) {
    return MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, name);
}

const char *http_query(const http_exchange *x, const char *name) {
    return MHD_lookup_connection_value(x->conn, MHD_GET_ARGUMENT_KIND, name);
}

bool http_body_announced(const http_exchange *x) { return x->chunked || x->expect_bytes > 0; }

const char *http_body(const http_exchange *x, size_t *n) {
    *n = x->body.n;
    return x->body.p ? x->body.p : "";
}

/* Gives the body's reserved bytes back to the budget and frees it. */
void http_body_release(http_exchange *x) {
    if (x->body_reserved) {
        pthread_mutex_lock(&x->srv->mu);
        x->srv->body_bytes -= x->body_reserved;
        pthread_mutex_unlock(&x->srv->mu);
        x->body_reserved = 0;
    }
    sbuf_free(&x->body);
}

/* Takes n more bytes of the max_body_total budget for x's body; false when
 * the budget is full (nothing taken). */
static bool body_reserve(http_exchange *x, size_t n) {
    http_server *s = x->srv;
    pthread_mutex_lock(&s->mu);
    bool ok = s->body_bytes + n <= s->c.max_body_total;
    if (ok) s->body_bytes += n;
    pthread_mutex_unlock(&s->mu);
    if (ok) x->body_reserved += n;
    return ok;
}

/* Escapes bytes that could forge or garble a log line (controls, ESC, DEL,
 * non-ASCII, the backslash) as \xNN; at most max_in input bytes. */
static void log_escape(char *out, size_t cap, const char *in, size_t max_in) {
    size_t o = 0;
    for (size_t i = 0; in[i] && i < max_in && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = 0;
}

const char *http_path_log(http_exchange *x) {
    if (!x->path_log) {
        x->path_log = xmalloc(200 * 4 + 1);
        log_escape(x->path_log, 200 * 4 + 1, x->path, 200);
    }
    return x->path_log;
}

const char *http_method_log(http_exchange *x) { return x->method_log; }

void http_set_reason(http_exchange *x, const char *msg) {
    if (!x->reason) x->reason = xmalloc(240 * 4 + 1);
    log_escape(x->reason, 240 * 4 + 1, msg ? msg : "", 240);
}

const char *http_reason(const http_exchange *x) { return x->reason ? x->reason : ""; }

void http_get_stats(const http_exchange *x, http_stats *out) {
    http_server *s = x->srv;
    pthread_mutex_lock(&s->mu);
    out->body_bytes = s->body_bytes;
    pthread_mutex_unlock(&s->mu);
    out->stream_bytes = atomic_load(&s->stream_bytes);
    out->n_window_idle = atomic_load(&s->n_window_idle);
    pthread_mutex_lock(&s->track_mu);
    out->n_deadline_closed = s->n_reaped;
    out->n_culled = s->n_culled;
    out->n_refused = s->n_refused;
    out->n_connections = s->n_tracks;
    pthread_mutex_unlock(&s->track_mu);
    pthread_mutex_lock(&s->pool_mu);
    out->n_workers = s->n_workers;
    out->n_workers_peak = s->n_workers_peak;
    pthread_mutex_unlock(&s->pool_mu);
    out->max_body_total = s->c.max_body_total;
    out->max_connections = s->c.max_connections + HTTP_CONN_RESERVE;
}

/* True when the peer closed its end of fd or the socket failed (a poll
 * and, for readable input, a peek: a pipelined byte is not a close). */
static bool fd_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    }
    return false;
}

/* Called by a handler on its worker while the connection is suspended, so
 * MHD neither reads nor closes the socket meanwhile. */
bool http_client_gone(http_exchange *x) {
    if (x->gone) return true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    if (fd_gone(ci->connect_fd)) x->gone = true;
    return x->gone;
}

/* ---- CORS ---- */

/* Whether `origin` (the request's Origin header) is in the allowed list:
 * items compared whole and case-insensitively, a configured trailing '/'
 * ignored, "*" matching any origin. */
static bool cors_allowed(const http_server *s, const char *origin) {
    if (!s->cors || !origin || !*origin) return false;
    size_t n_origin = strlen(origin);
    for (const char *p = s->cors; *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t k = strcspn(p, ",");
        size_t len = k;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '/')) len--;
        if (len == 1 && p[0] == '*') return true;
        if (len && len == n_origin && strncasecmp(p, origin, len) == 0) return true;
        p += k;
    }
    return false;
}

/* Header names a preflight may ask for are tokens separated by commas. */
static bool header_list_ok(const char *v) {
    if (strlen(v) > 512) return false;
    for (const char *p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == ',' || *p == ' '))
            return false;
    return true;
}

static void add_cors_headers(http_exchange *x, struct MHD_Response *r) {
    if (!x->srv->cors) return;
    /* The answer depends on the Origin whenever CORS is configured, also
     * when this origin is refused (caches must not mix them up). */
    MHD_add_response_header(r, "Vary", "Origin");
    const char *origin = http_header(x, "Origin");
    if (cors_allowed(x->srv, origin)) MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
}

/* ---- replies ---- */

void http_add_header(http_exchange *x, const char *name, const char *value) {
    if (x->n_extra >= HTTP_MAX_EXTRA_HEADERS) {
        log_warn("http: more than %d extra headers on %s %s; '%s' dropped", HTTP_MAX_EXTRA_HEADERS, x->method_log,
                 http_path_log(x), name);
        return;
    }
    x->extra[x->n_extra][0] = xstrdup(name);
    x->extra[x->n_extra][1] = xstrdup(value);
    x->n_extra++;
}

static void add_common_headers(http_exchange *x, struct MHD_Response *r, const char *content_type) {
    if (content_type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(r, "Server", "kvloom");
    for (int i = 0; i < x->n_extra; i++) MHD_add_response_header(r, x->extra[i][0], x->extra[i][1]);
    add_cors_headers(x, r);
    pthread_mutex_lock(&x->srv->mu);
    bool draining = x->srv->draining;
    pthread_mutex_unlock(&x->srv->mu);
    /* While draining, a keep-alive connection is not offered for reuse. */
    if (draining || x->closing) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* ---- the handler threads ---- */

/* Queues w for a worker, starting one when none is idle for it (up to
 * max_handlers); suspends `suspend` (the caller's connection, on the I/O
 * thread) first unless NULL. False once http_stop began: nothing was done. */
static bool pool_submit(http_server *s, work *w, struct MHD_Connection *suspend) {
    pthread_mutex_lock(&s->pool_mu);
    bool ok = !s->pool_stop;
    if (ok) {
        if (suspend) MHD_suspend_connection(suspend);
        w->next = NULL;
        if (s->q_tail) s->q_tail->next = w;
        else s->q_head = w;
        s->q_tail = w;
        s->n_queued++;
        if (s->n_queued > s->n_idle && s->n_workers < s->c.max_handlers) {
            pthread_t t;
            pthread_attr_t a;
            pthread_attr_init(&a);
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &a, worker_main, s) == 0) {
                s->n_workers++;
                s->n_workers_peak = MAX(s->n_workers_peak, s->n_workers);
            } else if (!s->n_workers) {
                log_error("http: cannot start a handler thread: %s", strerror(errno));
            }
            pthread_attr_destroy(&a);
        }
        pthread_cond_signal(&s->pool_cv);
    }
    pthread_mutex_unlock(&s->pool_mu);
    return ok;
}

/* A worker runs queued work until the pool stops or it has waited
 * HTTP_WORKER_IDLE_S for some: then it exits (the pool shrinks back after a
 * burst; pool_submit starts another when one is needed). */
static void *worker_main(void *arg) {
    http_server *s = arg;
    pthread_mutex_lock(&s->pool_mu);
    for (;;) {
        bool idle_long = false;
        while (!s->q_head && !s->pool_stop && !idle_long) {
            struct timespec dl;
            clock_gettime(CLOCK_MONOTONIC, &dl);
            dl.tv_sec += HTTP_WORKER_IDLE_S;
            s->n_idle++;
            idle_long = pthread_cond_timedwait(&s->pool_cv, &s->pool_mu, &dl) == ETIMEDOUT;
            s->n_idle--;
        }
        work *w = s->q_head;
        if (!w) break; /* stopping or idle, and nothing left to run */
        s->q_head = w->next;
        if (!s->q_head) s->q_tail = NULL;
        s->n_queued--;
        pthread_mutex_unlock(&s->pool_mu);
        if (w->x) run_handler(w->x);
        else produce(w->st);
        pthread_mutex_lock(&s->pool_mu);
    }
    /* s stays valid until http_stop has seen this (under pool_mu) */
    s->n_workers--;
    pthread_cond_broadcast(&s->pool_exit);
    pthread_mutex_unlock(&s->pool_mu);
    return NULL;
}

/* ---- replies ---- */

/* Hands r to MHD now (on the I/O thread, before the exchange was
 * dispatched) or keeps it for on_access after the resume (on a worker). */
static void answer_with(http_exchange *x, int status, struct MHD_Response *r) {
    if (x->dispatched) {
        x->resp = r;
        return;
    }
    if (x->hold) {
        x->held = r;
        return;
    }
    /* an early answer (413, 401, ...) is being sent: the reaper must not
     * add a 408 to it; past the deadline it just closes */
    track_answered(x->srv, x->conn);
    MHD_queue_response(x->conn, (unsigned)status, r);
    MHD_destroy_response(r);
}

void http_reply(http_exchange *x, int status, const char *content_type, const char *body, size_t n,
                const char *extra_header, const char *extra_value) {
    if (x->answered) {
        log_error("http: handler answered twice (%s %s)", x->method_log, http_path_log(x));
        return;
    }
    x->answered = true;
    x->status = status;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return;
    add_common_headers(x, r, content_type);
    if (extra_header && extra_value) MHD_add_response_header(r, extra_header, extra_value);
    answer_with(x, status, r);
}

/* Runs free_fn and frees s: once both the producer stopped (!active) and
 * MHD released the response. */
static void stream_finish(http_stream *s) {
    s->free_fn(s->sctx, s->done && !s->failed && s->delivered);
    atomic_fetch_sub(&s->srv->stream_bytes, s->buf.cap);
    sbuf_free(&s->buf);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static bool stopping(http_server *s) {
    pthread_mutex_lock(&s->pool_mu);
    bool v = s->pool_stop;
    pthread_mutex_unlock(&s->pool_mu);
    return v;
}

/* The producer, on a worker: runs fn until the stream ends, the buffer is
 * full (parked: the reader brings it back), or MHD released it. */
static void track_deadline(http_server *s, struct MHD_Connection *c, int64_t at, bool sooner, int in_request);
static int64_t secs_ns(int s);

/* With s->mu held: the connection's deadline is stall_timeout_s from now (no
 * producer at work; the reader waits for the client). */
static void stall_arm(http_stream *s) {
    if (s->srv->c.stall_timeout_s <= 0) return;
    s->stall_armed = true;
    track_deadline(s->srv, s->conn, clock_ns() + secs_ns(s->srv->c.stall_timeout_s), false, TRACK_STALL);
}

/* Bytes the socket holds that its peer has not acknowledged (its send
 * queue); 0 where that cannot be asked. */
static size_t sock_unsent(int fd) {
#if defined(SIOCOUTQ)
    int q = 0;
    if (fd >= 0 && ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0) return (size_t)q;
#else
    (void)fd;
#endif
    return 0;
}

/* The socket's bytes acknowledged by its peer and the peer's receive window
 * (*wnd; UINT32_MAX where the kernel's tcp_info is too short to have it:
 * tcpi_snd_wnd came with Linux 5.4, the length returned tells). Linux only;
 * false elsewhere or on failure. */
static bool sock_acked(int fd, uint64_t *acked, uint32_t *wnd) {
#if defined(__linux__) && defined(TCP_INFO)
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked)
        return false;
    *acked = ti.tcpi_bytes_acked;
    *wnd = len >= offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof ti.tcpi_snd_wnd ? ti.tcpi_snd_wnd : UINT32_MAX;
    return true;
#else
    (void)fd, (void)acked, (void)wnd;
    return false;
#endif
}

/* With s->mu held: whether the client has read nothing for park_idle_ms.
 * Two signs. Its kernel acknowledged none of the bytes the socket holds for
 * that long: its receive buffer is full (a slow reader's kernel goes on
 * acknowledging as it reads). Or its receive window shrank by about what it
 * acknowledged, HTTP_PARK_WINDOW_SHRINK in all, with no sign of a read for
 * that long (policy_rwnd_idle): its buffer still takes bytes but nothing
 * takes them out. The first alone found a client that does not read only
 * once its buffer was full, a few KiB for the tests' non-readers but up to
 * tcp_rmem's maximum (32 MiB here) for one that set SO_RCVBUF or whose
 * buffer autotuning had grown. Where the kernel has no tcpi_snd_wnd, the
 * first only. */
static bool sock_idle(http_stream *s, size_t queued, int64_t now) {
    uint64_t acked;
    uint32_t wnd;
    if (!s->srv->c.park_idle_ms || !sock_acked(s->fd, &acked, &wnd)) {
        if (!queued) s->acked_ns = 0;
        return false;
    }
    if (wnd != UINT32_MAX &&
        policy_rwnd_idle(&s->rwnd, acked, wnd, s->srv->c.park_idle_ms, HTTP_PARK_WINDOW_SHRINK, now)) {
        if (s->rwnd_idle) return true; /* (told once; it stops at its next event) */
        s->rwnd_idle = true;
        atomic_fetch_add(&s->srv->n_window_idle, 1);
        log_debug("http: a stream's client read nothing for %d ms (its receive window shrank by %u bytes)",
                  s->srv->c.park_idle_ms, s->rwnd.wnd_max - wnd);
        return true;
    }
    if (!queued) { /* nothing waits for the client: the clock starts later */
        s->acked_ns = 0;
        return false;
    }
    if (acked != s->acked || !s->acked_ns) {
        s->acked = acked;
        s->acked_ns = now;
        return false;
    }
    return now - s->acked_ns >= (int64_t)s->srv->c.park_idle_ms * 1000000;
}

/* With s->mu held: a stream stopped by sock_idle stays stopped until its
 * client reads: its kernel acknowledges something (a full buffer), or its
 * window's edge moves (policy_rwnd_consumed). The reader may take the
 * pending event into MHD's block and bring the producer back while the
 * client still reads nothing, and a stream parked and resumed every
 * park_idle_ms would run a step's worth each time. */
static bool sock_still_idle(http_stream *s) {
    uint64_t acked;
    uint32_t wnd;
    if (!s->squeezed || !sock_acked(s->fd, &acked, &wnd)) return false;
    if (s->rwnd_idle) return !policy_rwnd_consumed(&s->rwnd, acked, wnd, clock_ns());
    return acked == s->acked;
}

/* With s->mu held: the socket's send buffer cut to the least the kernel
 * allows (squeeze) or given back its size. A client found idle while the
 * socket still has room would be sent more, and the producer could not stop
 * with bytes of its own pending (the reader brings a stopped producer back
 * only by taking them); cut, the socket takes nothing until the client
 * reads, so the next event stays in the buffer and the producer stops
 * (test_server_backpressure's idle client: parked after 47-71 tokens; not
 * cut, 84, the send queue still taking events). */
static void sock_squeeze(http_stream *s, bool squeeze) {
    if (s->squeezed == squeeze || s->fd < 0) return;
    int v = squeeze ? 1 : s->sndbuf; /* the kernel raises 1 to its minimum */
    setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    s->squeezed = squeeze;
    if (squeeze && !s->rwnd_idle) return;
    /* Stopped by the window, the socket has nothing more to send once the
     * client's buffer took the pending bytes, so no acknowledgement would
     * tell that the client read (its kernel announces a window that grew
     * only when it was less than half the largest): a keepalive probe a
     * second draws one that carries the window. Off again once it reads. */
    int on = squeeze;
    setsockopt(s->fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL)
    int one = 1;
    if (squeeze) {
        setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one);
        setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof one);
    }
#endif
    if (!squeeze) s->rwnd_idle = false;
}

/* The buffer level below which the reader hands a stopped producer back to
 * a worker: half of what stops it. */
static size_t resume_level(const http_stream *s) {
    size_t pb = s->srv->c.park_bytes;
    return (pb && pb < HTTP_STREAM_BUFFER ? pb : HTTP_STREAM_BUFFER) / 2;
}

static void produce(http_stream *s) {
    sbuf out = {0};
    bool finish = false;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stop = s->done || s->failed || s->released;
        size_t pending = s->buf.n - s->off, pb = s->srv->c.park_bytes;
        /* park_bytes: what the client has not taken counts the socket's
         * send queue too (a client that does not read leaves it full; on
         * loopback it and the buffer held ~1000 tokens of logprobs before
         * the buffer alone filled). Only with bytes of our own pending, so
         * the reader always has some to send and brings the producer back. */
        size_t queued = pb ? sock_unsent(s->fd) : 0;
        size_t unsent = pb && (pending || s->blocked) ? pending + queued : pending;
        /* a client that read nothing for park_idle_ms stops it too, however
         * few the bytes: with the socket squeezed the next event stays
         * pending here, and the producer stops on it */
        bool idle = !stop && pb && !s->blocked && sock_idle(s, queued, clock_ns());
        if (idle) sock_squeeze(s, true);
        /* stopped at pb, it stays so (the engine keeps it parked) until
         * half of that is left: a client that takes a little does not flip
         * it parked and back for every event */
        bool over = !stop && pb && pending && (idle || unsent >= (s->blocked ? resume_level(s) : pb));
        if (stop || over || pending >= HTTP_STREAM_BUFFER) {
            /* told under s->mu: sctx lives until the stream is finished,
             * which waits for it (and the tellings keep their order) */
            if (over && !s->blocked && s->block_fn) s->block_fn(s->sctx, true);
            if (over) s->blocked = true;
            s->active = false;
            finish = s->released;
            /* parked, or done with bytes unsent: a client that reads none of
             * them for stall_timeout_s is closed by the reaper (the
             * connection is alive while the response is not released, which
             * s->mu orders) */
            if (!s->released && !s->failed && s->buf.n > s->off) stall_arm(s);
            pthread_mutex_unlock(&s->mu);
            if (!stop) log_debug("http: a stream's client is not reading; its producer waits");
            break;
        }
        if (s->blocked && unsent < resume_level(s) && !sock_still_idle(s)) {
            if (s->block_fn) s->block_fn(s->sctx, false);
            s->blocked = false;
            sock_squeeze(s, false);
            s->acked_ns = 0; /* the idle clock starts again */
        }
        pthread_mutex_unlock(&s->mu);
        out.n = 0;
        int rc = s->fn(s->sctx, &out);
        bool stop_now = rc > 0 && stopping(s->srv);
        pthread_mutex_lock(&s->mu);
        if (rc < 0 || stop_now) {
            s->failed = true;
        } else {
            if (out.n) {
                if (s->off && s->off == s->buf.n) s->buf.n = s->off = 0;
                if (s->off > s->buf.n / 2) { /* keep the buffer from creeping */
                    memmove(s->buf.p, s->buf.p + s->off, s->buf.n - s->off);
                    s->buf.n -= s->off;
                    s->off = 0;
                }
                size_t cap0 = s->buf.cap;
                sbuf_put(&s->buf, out.p, out.n);
                if (s->buf.cap != cap0) atomic_fetch_add(&s->srv->stream_bytes, s->buf.cap - cap0);
            }
            if (rc == 0) s->done = true;
        }
        /* While the reader waits, MHD does not watch the socket: a client
         * that left during a pause between tokens is noticed here. The
         * socket is open until MHD releases the response. */
        if (!out.n && !s->done && !s->released && s->reader_waiting && fd_gone(s->fd)) s->failed = true;
        if (s->reader_waiting && (out.n || s->done || s->failed)) {
            s->reader_waiting = false;
            MHD_resume_connection(s->conn);
        }
        pthread_mutex_unlock(&s->mu);
    }
    sbuf_free(&out);
    if (finish) stream_finish(s);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    http_stream *s = cls;
    pthread_mutex_lock(&s->mu);
    ssize_t ret;
    size_t avail = s->buf.n - s->off;
    if (s->failed) {
        ret = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (avail) {
        size_t k = MIN(max, avail);
        memcpy(buf, s->buf.p + s->off, k);
        s->off += k;
        if (s->off == s->buf.n) s->buf.n = s->off = 0;
        ret = (ssize_t)k;
        if (s->stall_armed) stall_arm(s); /* it reads: the clock restarts */
        /* a parked producer goes back to work once half the buffer is free */
        if (!s->active && !s->done && s->buf.n - s->off < resume_level(s)) {
            s->active = true;
            if (s->stall_armed) {
                s->stall_armed = false;
                track_deadline(s->srv, s->conn, 0, false, TRACK_IDLE);
            }
            if (!pool_submit(s->srv, &s->job, NULL)) {
                s->active = false;
                s->failed = true;
            }
        }
    } else if (s->done) {
        s->delivered = true;
        ret = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (!s->active) {
        /* not reachable (a parked producer has a full buffer); end rather
         * than wait for nobody */
        s->failed = true;
        ret = MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        s->reader_waiting = true;
        MHD_suspend_connection(s->conn);
        ret = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return ret;
}

/* MHD's response free callback: the connection is done with the stream
 * (sent, failed or closed); its socket is still open now. */
static void stream_release(void *cls) {
    http_stream *s = cls;
    pthread_mutex_lock(&s->mu);
    s->released = true;
    bool finish = !s->active;
    pthread_mutex_unlock(&s->mu);
    if (finish) stream_finish(s);
}

void http_reply_stream(http_exchange *x, int status, const char *content_type, http_stream_fn fn,
                       http_stream_free_fn free_fn, http_stream_block_fn block_fn, void *sctx) {
    if (x->answered) {
        log_error("http: handler answered twice (%s %s)", x->method_log, http_path_log(x));
        free_fn(sctx, false);
        return;
    }
    x->answered = true;
    x->status = status;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    http_stream *s = xcalloc(1, sizeof *s);
    s->srv = x->srv;
    s->conn = x->conn;
    s->fd = ci ? ci->connect_fd : -1;
    /* Linux grows a socket's send buffer up to tcp_wmem's maximum (4 MiB):
     * a client that does not read would have that much of its stream queued
     * in the kernel, and the producer would go on for thousands of tokens
     * before it parks. A fixed size keeps both bounded. */
    int sndbuf = HTTP_STREAM_SNDBUF;
    /* with --park-bytes, no more than half of it in the kernel (doubled
     * there): what a client that does not read is sent before its request
     * parks stays near that bound */
    if (x->srv->c.park_bytes) sndbuf = (int)MIN((size_t)sndbuf, MAX(x->srv->c.park_bytes / 2, (size_t)4096));
    if (s->fd >= 0) setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    s->sndbuf = sndbuf;
    s->fn = fn;
    s->free_fn = free_fn;
    s->block_fn = block_fn;
    s->sctx = sctx;
    s->job.st = s;
    s->active = true; /* its producer starts after the answer is queued */
    pthread_mutex_init(&s->mu, NULL);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, s, stream_release);
    if (!r) {
        s->failed = true;
        stream_finish(s);
        return;
    }
    add_common_headers(x, r, content_type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    if (x->dispatched) {
        x->stream = s; /* run_handler produces once it resumed the connection */
        x->resp = r;
        return;
    }
    MHD_queue_response(x->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    if (!pool_submit(x->srv, &s->job, NULL)) {
        pthread_mutex_lock(&s->mu);
        s->failed = true;
        s->active = false;
        bool finish = s->released;
        pthread_mutex_unlock(&s->mu);
        if (finish) stream_finish(s);
    }
}

/* The body of an error this layer answers (see http_error_fn): the route's
 * API shape, else an OpenAI error object. msg and code hold no characters
 * that JSON escapes (they are this file's constants and numbers). */
static size_t error_body(const http_server *srv, const char *path, int status, const char *code, const char *msg,
                         char *out, size_t cap) {
    size_t n = srv->c.error_body && path ? srv->c.error_body(path, status, code, msg, out, cap) : 0;
    if (n > 0 && n < cap) return n;
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    int k = code ? snprintf(out, cap, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
                            msg, type, code)
                 : snprintf(out, cap, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":null}}",
                            msg, type);
    return k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
}

/* Answers x with an error of this layer (extra header: NULL or one). */
static void reply_err(http_exchange *x, int status, const char *code, const char *msg, const char *hdr,
                      const char *val) {
    char body[600];
    size_t n = error_body(x->srv, x->path, status, code, msg, body, sizeof body);
    http_reply(x, status, "application/json", body, n, hdr, val);
    log_info("%s %s %d (%s)", x->method_log, http_path_log(x), status, msg);
}

static void reply_413(http_exchange *x) {
    char msg[120];
    snprintf(msg, sizeof msg, "request body larger than the limit of %zu bytes", x->srv->c.max_body_bytes);
    reply_err(x, 413, "body_too_large", msg, NULL, NULL);
}

/* A preflight (or any OPTIONS): 204 with what the server allows; the CORS
 * grant only for an allowed Origin. */
static void reply_options(http_exchange *x) {
    http_add_header(x, "Allow", "GET, HEAD, POST, DELETE, OPTIONS");
    if (cors_allowed(x->srv, http_header(x, "Origin"))) {
        http_add_header(x, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
        const char *want = http_header(x, "Access-Control-Request-Headers");
        char allow[600];
        snprintf(allow, sizeof allow, "Authorization, Content-Type%s%s", want && *want && header_list_ok(want) ? ", " : "",
                 want && *want && header_list_ok(want) ? want : "");
        http_add_header(x, "Access-Control-Allow-Headers", allow);
        http_add_header(x, "Access-Control-Max-Age", "600");
    }
    http_reply(x, 204, NULL, "", 0, NULL, NULL);
    char origin[200 * 4 + 1];
    log_escape(origin, sizeof origin, http_header(x, "Origin") ? http_header(x, "Origin") : "none", 200);
    log_debug("OPTIONS %s 204 (origin %s)", http_path_log(x), origin);
}

static void reply_draining(http_exchange *x) {
    reply_err(x, 503, "server_shutting_down", "the server is shutting down", NULL, NULL);
}

/* ---- connection deadlines (the reaper) ---- */

static conn_track *track_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Sets c's deadline to `at` (0: none); with `sooner`, only moves it closer.
 * in_request: TRACK_* (see conn_track). */
static void track_deadline(http_server *s, struct MHD_Connection *c, int64_t at, bool sooner, int in_request) {
    conn_track *t = track_of(c);
    if (!t) return;
    pthread_mutex_lock(&s->track_mu);
    if (!sooner || !t->deadline_ns || at < t->deadline_ns) t->deadline_ns = at;
    if (in_request == TRACK_IDLE) t->body_408[0] = 0; /* the next request's path is not known yet */
    t->in_request = in_request;
    pthread_mutex_unlock(&s->track_mu);
}

static int64_t secs_ns(int s) { return (int64_t)s * 1000000000LL; }

/* An answer to c's request is queued: no 408 any more (deadline kept). */
static void track_answered(http_server *s, struct MHD_Connection *c) {
    conn_track *t = track_of(c);
    if (!t) return;
    pthread_mutex_lock(&s->track_mu);
    t->in_request = TRACK_IDLE;
    pthread_mutex_unlock(&s->track_mu);
}

/* The key the per-address cap counts a peer under (see addr_key). */
static addr_key addr_key_of(const struct sockaddr *sa) {
    addr_key k;
    memset(&k, 0, sizeof k);
    bool loopback = false;
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        k.b[10] = k.b[11] = 0xff;
        memcpy(k.b + 12, &a->sin_addr, 4);
        loopback = k.b[12] == 127;
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        memcpy(k.b, &a->sin6_addr, 16);
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
            loopback = k.b[12] == 127;
        else if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
            loopback = true;
        else
            memset(k.b + 8, 0, 8); /* the /64 */
    }
    if (loopback) {
        memset(&k, 0, sizeof k);
        k.b[15] = 1; /* every loopback address is ::1 here */
    }
    return k;
}

void http_peer_key(http_exchange *x, unsigned char out[16]) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    addr_key k = addr_key_of(ci ? ci->client_addr : NULL);
    memcpy(out, k.b, 16);
}

/* MHD's accept policy, before a connection is set up: false when its
 * address holds max_conns_per_ip connections already (closed at once). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    (void)addrlen;
    http_server *s = cls;
    if (s->c.max_conns_per_ip <= 0) return MHD_YES;
    addr_key k = addr_key_of(addr);
    int n = 0;
    pthread_mutex_lock(&s->track_mu);
    for (conn_track *t = s->tracks; t; t = t->next) n += t->reaped != 2 && !memcmp(&t->addr, &k, sizeof k);
    bool ok = n < s->c.max_conns_per_ip;
    if (!ok) s->n_refused++;
    pthread_mutex_unlock(&s->track_mu);
    if (!ok) log_debug("http: a connection refused: its address holds %d already (--max-conns-per-ip)", n);
    return ok ? MHD_YES : MHD_NO;
}

/* With track_mu held, on the I/O thread, when a new connection `fresh`
 * takes the list past max_connections: closes the least recently active
 * connection that waits for a request — kept-alive between requests, or
 * opened and not yet sent a request line — or else `fresh` itself. A
 * client that holds slots with idle connections (or one request every few
 * seconds on each) cannot keep a new client out. */
static void cull_for(http_server *s, conn_track *fresh) {
    int n_live = 0;
    conn_track *victim = NULL;
    for (conn_track *t = s->tracks; t; t = t->next) {
        if (t->reaped) continue;
        n_live++;
        bool waiting = t->in_request == TRACK_KEEPALIVE ||
                       (t->in_request == TRACK_REQUEST && !t->n_requests && !t->request_line);
        if (t != fresh && waiting && t->fd >= 0 && (!victim || t->active_ns < victim->active_ns)) victim = t;
    }
    if (n_live <= s->c.max_connections) return;
    if (!victim) {
        victim = fresh;
        s->n_refused++;
        log_debug("http: a connection refused: every slot is in a request (--max-connections)");
    } else {
        s->n_culled++;
        log_debug("http: the least recently active idle connection closed for a new one (--max-connections)");
    }
    /* MHD sees the end of input and closes it (the reaper's way) */
    if (victim->fd >= 0) shutdown(victim->fd, SHUT_RDWR);
    victim->reaped = 2;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ca = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        conn_track *t = xcalloc(1, sizeof *t);
        t->fd = ci ? ci->connect_fd : -1;
        t->active_ns = clock_ns();
        t->deadline_ns = t->active_ns + secs_ns(s->c.header_timeout_s);
        t->in_request = TRACK_REQUEST; /* its first request is due */
        t->addr = addr_key_of(ca ? ca->client_addr : NULL);
        pthread_mutex_lock(&s->track_mu);
        t->next = s->tracks;
        if (s->tracks) s->tracks->prev = t;
        s->tracks = t;
        s->n_tracks++;
        if (s->n_tracks > s->c.max_connections) cull_for(s, t);
        pthread_mutex_unlock(&s->track_mu);
        *socket_context = t;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        /* MHD closes the socket only after this: the reaper never touches a
         * reused descriptor. */
        conn_track *t = *socket_context;
        pthread_mutex_lock(&s->track_mu);
        if (t->prev) t->prev->next = t->next;
        else s->tracks = t->next;
        if (t->next) t->next->prev = t->prev;
        s->n_tracks--;
        pthread_mutex_unlock(&s->track_mu);
        free(t);
        *socket_context = NULL;
    }
}

/* The request line of a new request arrived: its headers are due within
 * header_timeout_s (a kept-alive connection was on its idle deadline). */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    http_server *s = cls;
    conn_track *t = track_of(c);
    if (t) {
        pthread_mutex_lock(&s->track_mu);
        t->request_line = true;
        pthread_mutex_unlock(&s->track_mu);
    }
    track_deadline(s, c, clock_ns() + secs_ns(s->c.header_timeout_s), true, TRACK_REQUEST);
    return NULL;
}

/* A request on c completed: kept alive, it waits timeout_s for the next. */
static void track_keepalive(http_server *s, struct MHD_Connection *c) {
    conn_track *t = track_of(c);
    if (!t) return;
    pthread_mutex_lock(&s->track_mu);
    t->active_ns = clock_ns();
    t->deadline_ns = t->active_ns + secs_ns(s->c.timeout_s);
    t->in_request = TRACK_KEEPALIVE;
    t->request_line = false;
    t->body_408[0] = 0; /* the next request's path is not known yet */
    pthread_mutex_unlock(&s->track_mu);
}

/* The answer to a request that did not arrive in time. */
static const char msg_408[] = "the request did not arrive in time (headers or body too slow)";

/* The request's path is known (its headers are complete): its 408, should
 * its body be too slow, in its API's shape. */
static void track_set_path(http_exchange *x) {
    conn_track *t = track_of(x->conn);
    if (!t) return;
    char body[sizeof t->body_408];
    error_body(x->srv, x->path, 408, "request_timeout", msg_408, body, sizeof body);
    pthread_mutex_lock(&x->srv->track_mu);
    memcpy(t->body_408, body, sizeof body);
    pthread_mutex_unlock(&x->srv->track_mu);
}

/* Ends the connections past their deadline: in a request, 408 and the write
 * side shut, the rest a second later; idle, shut at once. MHD sees the end
 * of its input and closes the connection. */
static void *reaper_main(void *arg) {
    http_server *s = arg;
    char reply_408[600], default_408[320];
    error_body(s, NULL, 408, "request_timeout", msg_408, default_408, sizeof default_408);
    pthread_mutex_lock(&s->track_mu);
    while (!s->reaper_stop) {
        int64_t now = clock_ns();
        for (conn_track *t = s->tracks; t; t = t->next) {
            if (t->reaped == 2 || !t->deadline_ns || now < t->deadline_ns || t->fd < 0) continue;
            if (!t->reaped && t->in_request == TRACK_REQUEST) {
                /* the socket is non-blocking: a client whose receive window
                 * is full just misses the answer */
                const char *body = t->body_408[0] ? t->body_408 : default_408;
                int n_408 = snprintf(reply_408, sizeof reply_408,
                                     "HTTP/1.1 408 Request Timeout\r\nServer: kvloom\r\nConnection: close\r\n"
                                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                     strlen(body), body);
                ssize_t k = send(t->fd, reply_408, (size_t)MIN(n_408, (int)sizeof reply_408 - 1),
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                (void)k;
                shutdown(t->fd, SHUT_WR);
                t->reaped = 1;
                t->deadline_ns = now + 1000000000LL; /* time to read it */
                s->n_reaped++;
                log_debug("http: 408 to a connection past its header or body deadline");
                continue;
            }
            shutdown(t->fd, SHUT_RDWR);
            if (!t->reaped) {
                s->n_reaped++;
                if (t->in_request == TRACK_STALL)
                    log_info("http: closed a stream whose client read nothing for %d s", s->c.stall_timeout_s);
                else
                    log_debug("http: closed a kept-alive connection idle past --timeout");
            }
            t->reaped = 2;
        }
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += 200 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->track_cv, &s->track_mu, &dl);
    }
    pthread_mutex_unlock(&s->track_mu);
    return NULL;
}

/* ---- framing checks (request smuggling) ---- */

typedef struct framing {
    int n_cl, n_te;
    bool cl_differ, bad_name;
    const char *cl, *te;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!key) return MHD_YES;
    /* a name is a token (RFC 9110 5.1): "Content-Length : 5" is not
     * Content-Length to MHD but may be to a proxy in front */
    if (!*key || key[strspn(key, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")])
        f->bad_name = true;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (f->n_cl++ && strcmp(f->cl, value ? value : "") != 0) f->cl_differ = true;
        if (!f->cl) f->cl = value ? value : "";
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->n_te++;
        if (!f->te) f->te = value ? value : "";
    }
    return MHD_YES;
}

/* Answers and closes: an error object with `code`. */
static void reply_close(http_exchange *x, int status, const char *msg, const char *code) {
    x->closing = true;
    reply_err(x, status, code, msg, NULL, NULL);
}

/* Refuses framings that two parsers could read differently; true when
 * answered. Messages are constant strings (no request bytes in them). */
static bool framing_refused(http_exchange *x) {
    framing f = {0};
    MHD_get_connection_values(x->conn, MHD_HEADER_KIND, framing_header, &f);
    if (f.bad_name) {
        reply_close(x, 400, "a header name that is not a token (whitespace or a control character in it)", "bad_header");
    } else if (f.cl_differ) {
        reply_close(x, 400, "conflicting Content-Length headers", "bad_content_length");
    } else if (f.n_te && f.n_cl) {
        reply_close(x, 400, "Content-Length together with Transfer-Encoding", "bad_framing");
    } else if (f.n_te > 1 || (f.n_te && strcasecmp(f.te, "chunked") != 0)) {
        reply_close(x, 501, "unsupported Transfer-Encoding (only chunked)", "unsupported_transfer_encoding");
    } else {
        return false;
    }
    return true;
}

static void reply_over_budget(http_exchange *x) {
    char msg[160];
    snprintf(msg, sizeof msg, "the server holds too many request bodies at once (%zu bytes in all); retry later",
             x->srv->c.max_body_total);
    reply_err(x, 503, "server_busy", msg, "Retry-After", "1");
}

/* The body's deadline, the earliest of three rules:
 *  - pace: a grace of header_timeout_s after the headers, then
 *    HTTP_MIN_BODY_RATE on average for the announced (or, chunked, the
 *    received) size (Content-Length is at most 4x max_body_bytes here);
 *  - progress: some body bytes every header_timeout_s (a body complete but
 *    for its last byte is not held for the whole pace allowance);
 *  - absolute: body_timeout_s after the headers, whatever the size. */
static void body_deadline(http_exchange *x) {
    const http_config *c = &x->srv->c;
    unsigned long long due = MAX(x->expect_bytes, (unsigned long long)x->n_received);
    due = MIN(due, 1ULL << 40); /* no overflow below; far past any limit */
    int64_t pace = (int64_t)(due / HTTP_MIN_BODY_RATE) * 1000000000LL +
                   (int64_t)(due % HTTP_MIN_BODY_RATE) * 1000000000LL / HTTP_MIN_BODY_RATE;
    int64_t at = x->t_headers + secs_ns(c->header_timeout_s) + pace;
    at = MIN(at, (x->t_last ? x->t_last : x->t_headers) + secs_ns(c->header_timeout_s));
    at = MIN(at, x->t_headers + secs_ns(c->body_timeout_s));
    track_deadline(x->srv, x->conn, at, false, TRACK_REQUEST);
}

/* ---- MHD callbacks ---- */

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
    (void)version;
    http_server *srv = cls;
    http_exchange *x = *con_cls;
    if (!x) {
        /* the headers are complete; no body byte has been read */
        x = xcalloc(1, sizeof *x);
        x->srv = srv;
        x->conn = conn;
        snprintf(x->method, sizeof x->method, "%s", method ? method : "");
        log_escape(x->method_log, sizeof x->method_log, method ? method : "", 16);
        x->path = xstrdup(url ? url : "/");
        x->t_headers = clock_ns();
        *con_cls = x;
        track_set_path(x);
        if (framing_refused(x)) return MHD_YES;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        bool chunked = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
        if (cl) {
            char *end = NULL;
            unsigned long long v = strtoull(cl, &end, 10);
            if (end != cl) x->expect_bytes = v;
        }
        x->chunked = chunked;
        bool has_body = chunked || x->expect_bytes > 0;
        bool small = !chunked && x->expect_bytes <= HTTP_EARLY_CHECK_BYTES;
        conn_track *t = track_of(conn);
        if (t && ++t->n_requests >= HTTP_MAX_REQUESTS_PER_CONN) x->closing = true; /* its last one */
        if (!strcmp(x->method, "OPTIONS")) {
            /* a preflight carries no body; one that does is not read */
            if (has_body) reply_close(x, 400, "an OPTIONS request takes no body", "body_not_allowed");
            else body_deadline(x);
            return MHD_YES;
        }
        /* The precheck (the API key, the Host, ...) decides from the
         * headers before any body byte is read or counted. A refused
         * request's big body (or one of unknown size) is not read: the
         * answer goes now (before any size limit: a client without the key
         * learns nothing else) and the connection closes. A small one is
         * read and dropped (never held, never counted against
         * max_body_total) and the answer sent after it, so that a client
         * still sending reliably reads it. */
        if (srv->c.precheck) {
            bool closing = x->closing;
            x->closing = !small || closing;
            x->hold = small && has_body;
            bool ok = srv->c.precheck(srv->ctx, x);
            x->hold = false;
            if (!ok) {
                if (!x->answered) reply_close(x, 400, "refused", "refused");
                if (!x->held) return MHD_YES;
                body_deadline(x); /* a small body still comes */
                return MHD_YES;
            }
            x->closing = closing;
        }
        if (x->expect_bytes > srv->c.max_body_bytes) {
            x->too_large = true;
            /* A body up to a few times the limit is read and dropped so
             * the client (still sending) reliably sees the 413; a much
             * larger one, or one the client waits to send until it hears
             * "100 Continue", is refused at once and the connection
             * closed (no 100 Continue is sent for it). */
            const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
            if (x->expect_bytes / 4 > srv->c.max_body_bytes || (expect && !strcasecmp(expect, "100-continue"))) {
                x->closing = true;
                reply_413(x);
                return MHD_YES;
            }
        }
        body_deadline(x);
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        x->n_received += n;
        x->t_last = clock_ns();
        if (!x->answered && !x->too_large && !x->over_budget) {
            if (x->body.n + n > srv->c.max_body_bytes) {
                x->too_large = true;
                http_body_release(x);
            } else if (!body_reserve(x, n)) {
                x->over_budget = true;
                http_body_release(x);
            } else {
                sbuf_put(&x->body, upload_data, n);
            }
        }
        x->n_dropped += x->answered || x->too_large || x->over_budget ? n : 0;
        *upload_data_size = 0;
        body_deadline(x);
        /* A client that keeps sending far past the limit (a chunked body
         * without Content-Length) is disconnected. */
        if (x->n_dropped / 4 > srv->c.max_body_bytes) return MHD_NO;
        return MHD_YES;
    }
    if (x->dispatched) {
        /* resumed by the worker: its answer is ready */
        if (!x->resp) return MHD_NO; /* it could not be built (memory) */
        enum MHD_Result q = MHD_queue_response(conn, (unsigned)x->status, x->resp);
        MHD_destroy_response(x->resp);
        x->resp = NULL;
        return q;
    }
    if (x->held) {
        /* the small body of a request refused from its headers is in (and
         * dropped): its answer goes now */
        struct MHD_Response *r = x->held;
        x->held = NULL;
        track_answered(srv, conn);
        MHD_queue_response(conn, (unsigned)x->status, r);
        MHD_destroy_response(r);
        return MHD_YES;
    }
    if (x->answered) return MHD_YES;
    track_deadline(srv, conn, 0, false, TRACK_REQUEST); /* the handler may take its time */
    if (x->too_large) {
        reply_413(x);
        return MHD_YES;
    }
    if (x->over_budget) {
        reply_over_budget(x);
        return MHD_YES;
    }
    if (strcmp(x->method, "OPTIONS") == 0) {
        reply_options(x);
        return MHD_YES;
    }
    pthread_mutex_lock(&srv->mu);
    bool draining = srv->draining;
    if (!draining) {
        x->inflight = true;
        srv->n_inflight++;
    }
    pthread_mutex_unlock(&srv->mu);
    if (draining) {
        reply_draining(x);
        return MHD_YES;
    }
    /* to a worker; MHD leaves the connection alone until it resumes it */
    x->dispatched = true;
    x->job.x = x;
    if (!pool_submit(srv, &x->job, conn)) {
        /* http_stop began: answer here (the exchange stays counted in
         * n_inflight until on_completed, like any other) */
        x->dispatched = false;
        reply_draining(x);
    }
    return MHD_YES;
}

/* On a worker: the handler, then the answer back to the I/O thread. */
static void run_handler(http_exchange *x) {
    http_server *srv = x->srv;
    struct MHD_Connection *conn = x->conn;
    srv->fn(srv->ctx, x);
    http_body_release(x); /* handlers read the body only while they run */
    if (!x->answered) {
        reply_err(x, 500, NULL, "no response", NULL, NULL);
    }
    http_stream *st = x->stream;
    x->stream = NULL;
    /* from here on x belongs to the I/O thread (it may be freed at once) */
    MHD_resume_connection(conn);
    if (st) produce(st);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)toe;
    http_exchange *x = *con_cls;
    if (!x) return;
    if (x->resp) MHD_destroy_response(x->resp); /* closed before it was queued */
    if (x->held) MHD_destroy_response(x->held);
    /* a kept-alive connection now waits for its next request */
    track_keepalive(x->srv, conn);
    if (x->inflight) {
        pthread_mutex_lock(&x->srv->mu);
        x->srv->n_inflight--;
        pthread_cond_broadcast(&x->srv->idle);
        pthread_mutex_unlock(&x->srv->mu);
    }
    for (int i = 0; i < x->n_extra; i++) {
        free(x->extra[i][0]);
        free(x->extra[i][1]);
    }
    http_body_release(x);
    free(x->path);
    free(x->path_log);
    free(x->reason);
    free(x);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    if (log_level > LOG_DEBUG) return;
    char buf[512], esc[512 * 4 + 1];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    log_escape(esc, sizeof esc, buf, sizeof buf); /* MHD quotes request bytes */
    log_debug("mhd: %s", esc);
}

/* Fills *ss from a numeric host ("localhost" means 127.0.0.1). */
static int parse_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len, err_t *e) {
    memset(ss, 0, sizeof *ss);
    if (port < 0 || port > 65535) return err_set(e, ERR_INVALID, "port %d out of range [0, 65535]", port);
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
            return err_set(e, ERR_INVALID, "host '%s' is not a numeric IPv6 address", host);
        *len = sizeof *a6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        if (strcmp(host, "localhost") == 0) host = "127.0.0.1";
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return err_set(e, ERR_INVALID, "host '%s' is not a numeric IPv4 address", host);
        *len = sizeof *a4;
    }
    return 0;
}

int http_listen(const char *host, int port, int *fd_out, err_t *e) {
    *fd_out = -1;
    host = host && *host ? host : "127.0.0.1";
    struct sockaddr_storage ss;
    socklen_t len = 0;
    int rc = parse_addr(host, port, &ss, &len, e);
    if (rc < 0) return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(e, ERR_IO, "cannot create a socket: %s", strerror(errno));
    int one = 1;
    /* Lets a restarted server bind while old connections sit in TIME_WAIT;
     * a port that another process listens on is still refused. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 256) < 0) {
        int err = errno;
        close(fd);
        if (err == EADDRINUSE) return err_set(e, ERR_IO, "port %d is in use", port);
        if (err == EACCES) return err_set(e, ERR_IO, "port %d needs privileges (choose one above 1023)", port);
        if (err == EADDRNOTAVAIL) return err_set(e, ERR_IO, "address %s is not one of this machine's", host);
        return err_set(e, ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(err));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    *fd_out = fd;
    return 0;
}

/* The configured origins as one comma list (NULL when there are none). */
static char *cors_join(const http_config *c) {
    sbuf b = {0};
    for (int i = 0; i < c->n_cors_origins; i++) {
        if (!c->cors_origins[i] || !*c->cors_origins[i]) continue;
        if (b.n) sbuf_put(&b, ",", 1);
        sbuf_put(&b, c->cors_origins[i], strlen(c->cors_origins[i]));
    }
    return b.p;
}

/* Each connection takes a descriptor: lifts the soft limit towards `want`
 * (within the hard limit) so that --max-connections is reachable. */
static void raise_fd_limit(rlim_t want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (to <= rl.rlim_cur) return;
    rl.rlim_cur = to;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) log_debug("http: open files limit raised to %llu", (unsigned long long)to);
}

static void stop_reaper(http_server *s) {
    if (!s->reaper_started) return;
    pthread_mutex_lock(&s->track_mu);
    s->reaper_stop = true;
    pthread_cond_broadcast(&s->track_cv);
    pthread_mutex_unlock(&s->track_mu);
    pthread_join(s->reaper, NULL);
    s->reaper_started = false;
}

/* The server's locks and memory, once nothing runs. */
static void server_free(http_server *s) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->track_mu);
    pthread_cond_destroy(&s->track_cv);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_cond_destroy(&s->pool_cv);
    pthread_cond_destroy(&s->pool_exit);
    free(s->cors);
    free(s);
}

int http_start(const http_config *c, http_handler_fn fn, void *ctx, http_server **out, err_t *e) {
    *out = NULL;
    int fd = c->listen_fd;
    if (fd <= 0) {
        int rc = http_listen(c->host, c->port, &fd, e);
        if (rc < 0) return rc;
    }
    /* one poll() thread for every socket (why not epoll: the top of this
     * file); ITC: MHD_quiesce_daemon (http_drain) and MHD_resume_connection
     * from the workers need it */
    unsigned flags = MHD_USE_POLL | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    http_server *s = xcalloc(1, sizeof *s);
    s->c = *c;
    s->c.cors_origins = NULL;
    s->c.n_cors_origins = 0;
    s->cors = cors_join(c);
    if (!s->c.max_body_total) s->c.max_body_total = 4 * s->c.max_body_bytes;
    if (s->c.timeout_s <= 0) s->c.timeout_s = 60;
    if (s->c.header_timeout_s <= 0) s->c.header_timeout_s = 10;
    if (s->c.body_timeout_s <= 0) s->c.body_timeout_s = 60;
    if (s->c.max_handlers <= 0) s->c.max_handlers = 64;
    if (s->c.max_connections <= 0) s->c.max_connections = 1024;
    raise_fd_limit((rlim_t)s->c.max_connections + HTTP_CONN_RESERVE + 64);
    pthread_mutex_init(&s->pool_mu, NULL);
    s->fn = fn;
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->track_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->idle, &ca);
    pthread_cond_init(&s->track_cv, &ca);
    pthread_cond_init(&s->pool_cv, &ca); /* the workers' idle deadline */
    pthread_cond_init(&s->pool_exit, NULL);
    pthread_condattr_destroy(&ca);
    s->reaper_started = pthread_create(&s->reaper, NULL, reaper_main, s) == 0;
    s->d = MHD_start_daemon(flags, 0, on_accept, s, on_access, s,                                                  //
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,                                         //
                            MHD_OPTION_LISTEN_SOCKET, fd,                                                      //
                            /* the reserve: a connection past max_connections
                             * is accepted to cull an idle one (cull_for) */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->c.max_connections + HTTP_CONN_RESERVE),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)MAX(HTTP_STALL_TIMEOUT_S, s->c.timeout_s),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,                                     //
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,                                   //
                            MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,                                  //
                            MHD_OPTION_END);
    if (!s->d || !s->reaper_started) {
        if (s->d) MHD_stop_daemon(s->d);
        else close(fd);
        stop_reaper(s);
        server_free(s);
        return err_set(e, ERR_IO, "cannot start the HTTP server on port %d", c->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di && di->port ? di->port : c->port;
    *out = s;
    return 0;
}

int http_port(const http_server *s) { return s->port; }

int http_drain(http_server *s) {
    pthread_mutex_lock(&s->mu);
    bool was = s->draining;
    s->draining = true;
    int n = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    if (!was) {
        /* MHD stops polling the socket; closing it makes new connections
         * fail at once instead of waiting in the backlog. */
        MHD_socket fd = MHD_quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
    return n;
}

int http_wait_idle(http_server *s, int timeout_ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (s->n_inflight > 0)
        if (pthread_cond_timedwait(&s->idle, &s->mu, &dl) == ETIMEDOUT) break;
    int n = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Nothing is dispatched from now on (new requests get 503, a parked
 * stream ends); the workers finish what is queued or running, each
 * resuming its connection, and exit. Then no connection is suspended and
 * MHD may stop. A handler that never returns blocks this, as a connection
 * thread did before. */
void http_stop(http_server *s) {
    if (!s) return;
    stop_reaper(s);
    pthread_mutex_lock(&s->pool_mu);
    s->pool_stop = true;
    pthread_cond_broadcast(&s->pool_cv);
    while (s->n_workers > 0) pthread_cond_wait(&s->pool_exit, &s->pool_mu);
    pthread_mutex_unlock(&s->pool_mu);
    /* work left only if no worker could ever be started: run it here */
    for (work *w; (w = s->q_head);) {
        s->q_head = w->next;
        if (w->x) run_handler(w->x);
        else produce(w->st);
    }
    MHD_stop_daemon(s->d);
    server_free(s);
}
