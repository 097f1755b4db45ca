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
 * asserts on request bytes; n_inflight counts exactly the exchanges that were
 * handed to the handler and have not completed (MHD's completion callback),
 * so that a drain knows what it waits for.
 *
 * CORS decisions, in one place (http.h): a preflight is any OPTIONS request;
 * an allowed Origin is echoed (never a literal "*", which would not do for a
 * page that sends credentials) with Vary: Origin; the preflight allows the
 * headers the browser asks for (an SDK adds its own x-... headers) plus
 * Authorization and Content-Type.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct http_server {
    struct MHD_Daemon *d;
    http_config c;
    http_handler_fn fn;
    void *ctx;
    int port;
    char *cors;          /* the allowed origins as one comma list, or NULL   */
    pthread_mutex_t mu;  /* guards the three below                          */
    pthread_cond_t idle; /* signalled when n_inflight drops                 */
    bool draining;
    int n_inflight;      /* exchanges in the handler or streaming            */
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
    bool inflight;       /* counted in srv->n_inflight                      */
    int status;
    int n_extra;
    char *extra[HTTP_MAX_EXTRA_HEADERS][2];
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
        log_warn("http: more than %d extra headers on %s %s; '%s' dropped", HTTP_MAX_EXTRA_HEADERS, x->method,
                 x->path, name);
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
    if (draining) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
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
    add_common_headers(x, r, content_type);
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
    add_common_headers(x, r, content_type);
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
    log_debug("OPTIONS %.200s 204 (origin %.200s)", x->path, http_header(x, "Origin") ? http_header(x, "Origin") : "none");
}

static void reply_draining(http_exchange *x) {
    static const char m[] = "{\"error\":{\"message\":\"the server is shutting down\",\"type\":\"server_error\","
                            "\"param\":null,\"code\":\"server_shutting_down\"}}";
    http_reply(x, 503, "application/json", m, sizeof m - 1, NULL, NULL);
    log_info("%s %.200s 503 (shutting down)", x->method, x->path);
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
    http_buf b = {0};
    for (int i = 0; i < c->n_cors_origins; i++) {
        if (!c->cors_origins[i] || !*c->cors_origins[i]) continue;
        if (b.n) http_buf_add(&b, ",", 1);
        http_buf_add(&b, c->cors_origins[i], strlen(c->cors_origins[i]));
    }
    return b.p;
}

int http_start(const http_config *c, http_handler_fn fn, void *ctx, http_server **out, err_t *e) {
    *out = NULL;
    int fd = c->listen_fd;
    if (fd <= 0) {
        int rc = http_listen(c->host, c->port, &fd, e);
        if (rc < 0) return rc;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC; /* ITC: MHD_quiesce_daemon (http_drain) needs it */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    http_server *s = xcalloc(1, sizeof *s);
    s->c = *c;
    s->c.cors_origins = NULL;
    s->c.n_cors_origins = 0;
    s->cors = cors_join(c);
    s->fn = fn;
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->idle, &ca);
    pthread_condattr_destroy(&ca);
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,                                                  //
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,                                         //
                            MHD_OPTION_LISTEN_SOCKET, fd,                                                      //
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(c->max_connections > 0 ? c->max_connections : 256),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(c->timeout_s > 0 ? c->timeout_s : 600), //
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,                                     //
                            MHD_OPTION_END);
    if (!s->d) {
        close(fd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->idle);
        free(s->cors);
        free(s);
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

void http_stop(http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s->cors);
    free(s);
}
