/*
 * http.c — libmicrohttpd glue (contract in http.h): thread per connection,
 * body collection under a size limit, synchronous handlers, pulled streams,
 * disconnect detection.
 *
 * Why thread per connection: a handler may block for seconds (waiting for
 * generated tokens) and a stream producer blocks between tokens; with one
 * thread per connection both are plain blocking code and a slow client only
 * holds its own thread. The connection limit bounds the thread count.
 *
 * Invariants: a handler answers exactly once; a stream's free function runs
 * exactly once (from MHD's response free callback); nothing here exits or
 * asserts on request bytes.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct http_server {
    struct MHD_Daemon *d;
    http_config c;
    http_handler_fn fn;
    void *ctx;
    int port;
};

struct http_exchange {
    http_server *srv;
    struct MHD_Connection *conn;
    char method[16];
    char *path;
    http_buf body;
    bool too_large;
    size_t n_dropped;  /* body bytes discarded after the limit */
    bool answered;
    bool gone;
    int status;
};

typedef struct http_stream {
    http_exchange *x; /* valid while MHD pulls (the connection is alive)  */
    http_stream_fn fn;
    http_stream_free_fn free_fn;
    void *sctx;
    http_buf pending;
    size_t off;
    bool done;     /* the producer returned 0                             */
    bool failed;
} http_stream;

/* ---- buffers ---- */

void http_buf_add(http_buf *b, const void *data, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

void http_buf_printf(http_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[512];
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof small) {
        http_buf_add(b, small, (size_t)k);
        return;
    }
    char *big = xmalloc((size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    http_buf_add(b, big, (size_t)k);
    free(big);
}

void http_buf_free(http_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- exchange accessors ---- */

const char *http_method(const http_exchange *x) { return x->method; }
const char *http_path(const http_exchange *x) { return x->path; }
int http_status(const http_exchange *x) { return x->status; }

const char *http_header(const http_exchange *x, const char *name) {
    return MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, name);
}

const char *http_body(const http_exchange *x, size_t *n) {
    *n = x->body.n;
    return x->body.p ? x->body.p : "";
}

bool http_client_gone(http_exchange *x) {
    if (x->gone) return true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(x->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    int fd = ci->connect_fd;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) {
        x->gone = true;
    } else if (p.revents & POLLIN) {
        char c;
        ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) x->gone = true;
    }
    return x->gone;
}

/* ---- replies ---- */

static void add_common_headers(struct MHD_Response *r, const char *content_type) {
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(r, "Server", "kvloom");
}

void http_reply(http_exchange *x, int status, const char *content_type, const char *body, size_t n,
                const char *extra_header, const char *extra_value) {
    if (x->answered) {
        log_error("http: handler answered twice (%s %s)", x->method, x->path);
        return;
    }
    x->answered = true;
    x->status = status;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return;
    add_common_headers(r, content_type);
    if (extra_header && extra_value) MHD_add_response_header(r, extra_header, extra_value);
    MHD_queue_response(x->conn, (unsigned)status, r);
    MHD_destroy_response(r);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    http_stream *s = cls;
    for (;;) {
        if (s->off < s->pending.n) {
            size_t k = MIN(max, s->pending.n - s->off);
            memcpy(buf, s->pending.p + s->off, k);
            s->off += k;
            return (ssize_t)k;
        }
        s->pending.n = 0;
        s->off = 0;
        if (s->done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (s->failed || http_client_gone(s->x)) {
            s->failed = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        int rc = s->fn(s->sctx, &s->pending);
        if (rc < 0) {
            s->failed = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (rc == 0) s->done = true;
    }
}

static void stream_free(void *cls) {
    http_stream *s = cls;
    s->free_fn(s->sctx, s->done && !s->failed && s->off >= s->pending.n);
    http_buf_free(&s->pending);
    free(s);
}

void http_reply_stream(http_exchange *x, int status, const char *content_type, http_stream_fn fn,
                       http_stream_free_fn free_fn, void *sctx) {
    if (x->answered) {
        log_error("http: handler answered twice (%s %s)", x->method, x->path);
        free_fn(sctx, false);
        return;
    }
    x->answered = true;
    x->status = status;
    http_stream *s = xcalloc(1, sizeof *s);
    s->x = x;
    s->fn = fn;
    s->free_fn = free_fn;
    s->sctx = sctx;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, s, stream_free);
    if (!r) {
        stream_free(s);
        return;
    }
    add_common_headers(r, content_type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_queue_response(x->conn, (unsigned)status, r);
    MHD_destroy_response(r); /* the connection keeps it; stream_free runs at the end */
}

static void reply_413(http_exchange *x) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "{\"error\":{\"message\":\"request body larger than the limit of %zu bytes\","
             "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"body_too_large\"}}",
             x->srv->c.max_body_bytes);
    http_reply(x, 413, "application/json", msg, strlen(msg), NULL, NULL);
}

/* ---- MHD callbacks ---- */

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
    (void)version;
    http_server *srv = cls;
    http_exchange *x = *con_cls;
    if (!x) {
        x = xcalloc(1, sizeof *x);
        x->srv = srv;
        x->conn = conn;
        snprintf(x->method, sizeof x->method, "%s", method ? method : "");
        x->path = xstrdup(url ? url : "/");
        *con_cls = x;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end = NULL;
            unsigned long long v = strtoull(cl, &end, 10);
            if (end != cl && v > srv->c.max_body_bytes) {
                x->too_large = true;
                /* A body up to a few times the limit is read and dropped so
                 * the client (still sending) reliably sees the 413; a much
                 * larger one is refused at once and the connection closed. */
                if (v / 4 > srv->c.max_body_bytes) {
                    reply_413(x);
                    return MHD_YES;
                }
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!x->answered && !x->too_large) {
            if (x->body.n + *upload_data_size > srv->c.max_body_bytes) {
                x->too_large = true;
                http_buf_free(&x->body);
            } else {
                http_buf_add(&x->body, upload_data, *upload_data_size);
            }
        }
        x->n_dropped += x->too_large ? *upload_data_size : 0;
        *upload_data_size = 0;
        /* A client that keeps sending far past the limit (a chunked body
         * without Content-Length) is disconnected. */
        if (x->n_dropped / 4 > srv->c.max_body_bytes) return MHD_NO;
        return MHD_YES;
    }
    if (x->answered) return MHD_YES;
    if (x->too_large) {
        reply_413(x);
        return MHD_YES;
    }
    srv->fn(srv->ctx, x);
    if (!x->answered) {
        const char *m = "{\"error\":{\"message\":\"no response\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        http_reply(x, 500, "application/json", m, strlen(m), NULL, NULL);
    }
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    (void)toe;
    http_exchange *x = *con_cls;
    if (!x) return;
    http_buf_free(&x->body);
    free(x->path);
    free(x);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    if (log_level > LOG_DEBUG) return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    log_debug("mhd: %s", buf);
}

int http_start(const http_config *c, http_handler_fn fn, void *ctx, http_server **out, err_t *e) {
    *out = NULL;
    if (c->port < 0 || c->port > 65535) return err_set(e, ERR_INVALID, "port %d out of range [0, 65535]", c->port);
    const char *host = c->host && *c->host ? c->host : "127.0.0.1";
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)c->port);
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
            return err_set(e, ERR_INVALID, "host '%s' is not a numeric IPv6 address", host);
        flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)c->port);
        if (strcmp(host, "localhost") == 0) host = "127.0.0.1";
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return err_set(e, ERR_INVALID, "host '%s' is not a numeric IPv4 address", host);
    }
    http_server *s = xcalloc(1, sizeof *s);
    s->c = *c;
    s->fn = fn;
    s->ctx = ctx;
    s->d = MHD_start_daemon(flags, (uint16_t)c->port, NULL, NULL, on_access, s,                        //
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,                                   //
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,                              //
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(c->max_connections > 0 ? c->max_connections : 256),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(c->timeout_s > 0 ? c->timeout_s : 600), //
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,                               //
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, 256u,                                        //
                            MHD_OPTION_END);
    if (!s->d) {
        free(s);
        return err_set(e, ERR_IO, "cannot listen on %s:%d (address in use or not available)", host, c->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : c->port;
    *out = s;
    return 0;
}

int http_port(const http_server *s) { return s->port; }

void http_stop(http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}
