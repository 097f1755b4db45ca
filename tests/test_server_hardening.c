/*
 * test_server_hardening.c — hostile HTTP against `kvloom serve` through raw
 * sockets (docs/server.md "Limits and security"):
 *  - connection exhaustion: 30 idle sockets and 10 that dribble a byte at a
 *    time are all answered 408 and closed by the server (--header-timeout 2,
 *    keep-alive --timeout 600: only the header deadline can close them);
 *    with 200 idle and 50 dribbling against 64 slots a client that retries
 *    is served; --max-conns-per-ip: a 9th socket from 127.0.0.1 is
 *    closed; 500 idle sockets leave the server's thread count
 *    (/proc/PID/status) within 2 of what it was, and it serves;
 *  - keep-alive: an idle kept-alive connection is closed (no answer) after
 *    --timeout, a second request dribbled after its request line is
 *    answered 408 after --header-timeout; a request stalled in its headers,
 *    its body or its chunked body gets 408 and Connection: close;
 *  - the HTTP layer's errors (413, a framing 400, 408) in the error shape of
 *    the path's API: OpenAI's, Responses' (the same object), Anthropic's,
 *    Ollama's;
 *  - bodies: an unauthenticated 8 MB upload is answered 401 from its headers
 *    (no body byte sent), --max-body-total gives 503 while two big bodies
 *    are held (kvloom_http_body_bytes) and not after, huge token arrays and /detokenize text past
 *    --max-body are 400s;
 *  - smuggling: conflicting Content-Length, Content-Length with chunked, a
 *    transfer coding other than chunked, a header name with a space: each
 *    answered and closed at once, and the smuggled request never answered;
 *  - an empty --api-key (or key file) is refused, the Host check (DNS rebinding), 415 for
 *    cross-site form posts, control bytes of a path escaped in the log;
 *  - /models/{id}, 405 with Allow, max_tokens / tools validation;
 *  - a table of malformed requests, each with its status (0: closed without
 *    an answer), the server serving /health after each.
 * No assertion is on time: a wait is "until it happens, or a generous limit".
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/http.h"
#include "server_util.h"

static srv g_a, g_b; /* A: no key, tight limits; B: --api-key, per-IP cap */
static srv g_c;      /* C: the default connection limits, --header-timeout 60 */

/* One raw exchange: status of the first answer (0: none), the whole bytes
 * received, and whether the server closed the connection (EOF or reset)
 * rather than the read timing out. */
typedef struct raw {
    int status;
    char *text;
    size_t n;
    bool closed;
} raw;

static void raw_free(raw *r) {
    free(r->text);
    memset(r, 0, sizeof *r);
}

static void raw_read(int fd, raw *r) {
    size_t cap = 65536;
    r->text = xmalloc(cap);
    r->n = 0;
    for (;;) {
        if (r->n + 4096 > cap) r->text = xrealloc(r->text, cap *= 2);
        ssize_t k = recv(fd, r->text + r->n, cap - r->n - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) r->closed = true;
        if (k <= 0) break;
        r->n += (size_t)k;
    }
    r->text[r->n] = 0;
    if (sscanf(r->text, "HTTP/1.%*d %d", &r->status) != 1) r->status = 0;
}

static void raw_send(int port, const char *src, const char *data, size_t n, int timeout_s, raw *r) {
    memset(r, 0, sizeof *r);
    int fd = su_connect_from(src, port, timeout_s, false);
    if (fd < 0 || su_send_all(fd, data, n) < 0) {
        r->closed = true;
        r->text = xstrdup("");
        if (fd >= 0) {
            /* the server may have answered and closed already */
            free(r->text);
            raw_read(fd, r);
            close(fd);
        }
        return;
    }
    raw_read(fd, r);
    close(fd);
}

/* GET /health from src: the status, 0 when the connection was closed
 * without an answer. */
static int health_from(int port, const char *src, const char *host) {
    char req[256];
    snprintf(req, sizeof req, "GET /health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host);
    raw r;
    raw_send(port, src, req, strlen(req), 30, &r);
    int st = r.status == 200 && strstr(r.text, "{\"status\":\"ok\",") ? 200 : r.status;
    raw_free(&r);
    return st;
}

/* A POST with a JSON body and extra header lines; Connection: close. */
static void post_raw(int port, const char *path, const char *headers, const char *body, raw *r) {
    size_t n = strlen(body);
    char *req = xmalloc(n + 1024);
    int k = snprintf(req, 1024, "POST %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
                     path, headers ? headers : "Content-Type: application/json\r\n", n);
    memcpy(req + k, body, n);
    raw_send(port, NULL, req, (size_t)k + n, 30, r);
    free(req);
}

/* The JSON body of a raw answer (after its headers), or NULL. */
static json_t *raw_json(const raw *r) {
    const char *b = strstr(r->text, "\r\n\r\n");
    return b ? json_loads(b + 4, 0, NULL) : NULL;
}

/* Whether o is an error object of the API `api` names, with `code` (the
 * OpenAI shapes) and a message holding `needle`:
 *   openai, responses: {"error": {"message", "type", "param", "code"}}
 *   anthropic: {"type": "error", "error": {"type": anthropic_type, "message"}}
 *   ollama: {"error": message} and nothing else. */
static bool error_shape_is(json_t *o, const char *api, const char *code, const char *anthropic_type,
                           const char *needle) {
    json_t *e = json_object_get(o, "error");
    if (!strcmp(api, "ollama"))
        return json_object_size(o) == 1 && json_is_string(e) && strstr(json_string_value(e), needle);
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!json_is_object(e) || !msg || !strstr(msg, needle)) return false;
    if (!strcmp(api, "anthropic"))
        return json_object_size(o) == 2 && !strcmp(json_string_value(json_object_get(o, "type")), "error") &&
               json_object_size(e) == 2 && !strcmp(json_string_value(json_object_get(e, "type")), anthropic_type);
    return json_object_size(o) == 1 && json_object_size(e) == 4 && json_is_string(json_object_get(e, "type")) &&
           json_is_null(json_object_get(e, "param")) && !strcmp(json_string_value(json_object_get(e, "code")), code);
}

static int count_str(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* ---- 1. connection exhaustion ---- */

typedef struct dribble {
    int *fds;
    int n;
    atomic_bool stop; /* set by the main thread (volatile raced: ThreadSanitizer) */
} dribble;

/* Sends the next byte of a request line on every socket every 300 ms. */
static void *dribble_main(void *arg) {
    dribble *d = arg;
    static const char line[] = "GET /health HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (size_t i = 0; !atomic_load(&d->stop); i = (i + 1) % (sizeof line - 1)) {
        for (int j = 0; j < d->n; j++) send(d->fds[j], line + i, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        usleep(300000);
    }
    return NULL;
}

/* True once the server has closed fd (EOF or reset), reading what came
 * before; *got_408 (unless NULL) is set when that was a 408 answer. */
static bool closed_by_server(int fd, bool *got_408) {
    char buf[4096];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        if (k > 0) {
            buf[k] = 0;
            if (got_408 && strstr(buf, "HTTP/1.1 408 ") && strstr(buf, "Connection: close")) *got_408 = true;
            continue;
        }
        return k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN && errno != EINTR);
    }
}

/* n_idle silent sockets and n_drib dribbling ones against A (64 slots,
 * --header-timeout 2, keep-alive --timeout 600). Returns the fds. */
static int *flood_open(int port, int n_idle, int n_drib, dribble *d, pthread_t *th) {
    int n = n_idle + n_drib, n_open = 0;
    int *fds = xmalloc((size_t)n * sizeof *fds);
    for (int i = 0; i < n; i++) {
        fds[i] = su_connect_from(NULL, port, 5, true);
        n_open += fds[i] >= 0;
    }
    CHECK_EQ_INT(n_open, n);
    d->fds = fds + n_idle;
    d->n = n_drib;
    atomic_store(&d->stop, false);
    pthread_create(th, NULL, dribble_main, d);
    return fds;
}

static void flood_close(int *fds, int n, dribble *d, pthread_t th) {
    atomic_store(&d->stop, true);
    pthread_join(th, NULL);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
}

/* /health until it answers 200 or limit_s passed; the status. */
static int health_retry(int port, double limit_s, int *n_tries) {
    int st = 0;
    *n_tries = 0;
    for (double t0 = su_now(); st != 200 && su_now() - t0 < limit_s; usleep(100000), ++*n_tries)
        st = health_from(port, NULL, "localhost");
    return st;
}

static void check_flood(int port) {
    /* 1. under the slot limit, nothing but the header deadline can close
     * these: every one is closed, the dribblers while they still send */
    enum { N_IDLE = 30, N_DRIB = 10, N = N_IDLE + N_DRIB };
    dribble d;
    pthread_t th;
    double closed0 = metric(port, "kvloom_http_deadline_closed_total");
    double t0 = su_now();
    int *fds = flood_open(port, N_IDLE, N_DRIB, &d, &th);
    CHECK_EQ_INT(health_from(port, NULL, "localhost"), 200);
    bool done[N] = {0}, got_408[N] = {0};
    int n_closed = 0;
    while (n_closed < N && su_now() - t0 < 30) {
        for (int i = 0; i < N; i++)
            if (!done[i] && fds[i] >= 0 && closed_by_server(fds[i], &got_408[i])) done[i] = true, n_closed++;
        usleep(50000);
    }
    int n_drib_closed = 0, n_408 = 0;
    for (int i = N_IDLE; i < N; i++) n_drib_closed += done[i];
    for (int i = 0; i < N; i++) n_408 += got_408[i];
    CHECK_MSG(n_closed == N, "%d of %d idle/dribbling sockets closed by the server (%d of %d dribblers)", n_closed, N,
              n_drib_closed, N_DRIB);
    /* a first request is due on each: every one is told 408 (the dribblers
     * half-way through their headers) */
    CHECK_MSG(n_408 == N, "%d of %d sockets past the header deadline answered 408", n_408, N);
    printf("  flood: %d idle and %d dribbling sockets closed by the server after %.1f s (--header-timeout 2)\n", N_IDLE,
           N_DRIB, su_now() - t0);
    double closed1 = metric(port, "kvloom_http_deadline_closed_total");
    CHECK_MSG(closed0 >= 0 && closed1 - closed0 >= N, "kvloom_http_deadline_closed_total went from %.0f to %.0f", closed0,
              closed1);
    flood_close(fds, N, &d, th);

    /* 2. 250 sockets against 64 slots: connections over the limit wait in
     * the listen backlog (or are refused), and the header deadline frees
     * the slots; a client that retries is served (with the old 600 s idle
     * timeout it never was) */
    enum { M_IDLE = 200, M_DRIB = 50 };
    t0 = su_now();
    fds = flood_open(port, M_IDLE, M_DRIB, &d, &th);
    int n_tries;
    CHECK_EQ_INT(health_retry(port, 30, &n_tries), 200);
    printf("  flood: /health answered after %.1f s (%d tries) with %d idle and %d dribbling sockets opened (64 slots)\n",
           su_now() - t0, n_tries, M_IDLE, M_DRIB);
    flood_close(fds, M_IDLE + M_DRIB, &d, th);
    CHECK_EQ_INT(health_retry(port, 10, &n_tries), 200);
}

/* Keep-alive: on B (--timeout 3, --header-timeout 30) an idle kept-alive
 * connection is closed; on A (--timeout 600, --header-timeout 2) a second
 * request whose headers dribble after its request line is closed. */
static void check_keepalive(int port_a, int port_b) {
    static const char req[] = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    for (int k = 0; k < 2; k++) {
        int fd = su_connect_from(NULL, k ? port_a : port_b, 30, false);
        CHECK(fd >= 0 && su_send_all(fd, req, sizeof req - 1) == 0);
        CHECK_MSG(su_read_until(fd, "{\"status\":\"ok\",", 30), "keep-alive: no first answer");
        static const char line[] = "GET /health HTTP/1.1\r\nX-";
        if (k) CHECK(su_send_all(fd, line, sizeof line - 1) == 0);
        bool closed = false, got_408 = false;
        double t0 = su_now();
        for (int i = 0; !closed && su_now() - t0 < 20; i++) {
            if (k) send(fd, "a", 1, MSG_NOSIGNAL);
            usleep(200000);
            closed = closed_by_server(fd, &got_408);
        }
        CHECK_MSG(closed, k ? "a dribbled second request on a kept-alive connection was not closed"
                            : "an idle kept-alive connection was not closed (--timeout 3)");
        /* a started request is answered 408; an idle connection is not */
        CHECK_MSG(got_408 == (k == 1), k ? "no 408 for a second request stalled in its headers"
                                         : "a 408 on an idle kept-alive connection (no request was started)");
        printf("  keep-alive: %s closed after %.1f s\n", k ? "dribbled second request" : "idle connection",
               su_now() - t0);
        close(fd);
    }
}

/* A request that stalls half-way (in its headers, or in its body) past its
 * deadline on A (--header-timeout 2) is answered 408 and closed. */
static void check_408(int port) {
    static const char *const stalls[] = {
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Ty",
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{\"prompt\":\"Once upon",
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n8\r\n{\"prompt\r\n",
    };
    static const char *const names[] = {"headers", "body", "chunked body"};
    for (int i = 0; i < 3; i++) {
        raw r;
        raw_send(port, NULL, stalls[i], strlen(stalls[i]), 30, &r);
        CHECK_MSG(r.status == 408 && r.closed && strstr(r.text, "Connection: close") &&
                      strstr(r.text, "\"code\":\"request_timeout\""),
                  "a request stalled in its %s: %d%s %.200s", names[i], r.status, r.closed ? " (closed)" : "", r.text);
        raw_free(&r);
    }
    CHECK_EQ_INT(health_from(port, NULL, "localhost"), 200);
}

/* The HTTP layer's own errors (a body over --max-body, a malformed
 * Content-Length, a request stalled past --header-timeout) in the shape of
 * the API of the path (api.h, routes_error_body): each client reads its own
 * error object, never another API's. */
static void check_transport_shapes(int port) {
    static const struct {
        const char *path, *api;
    } apis[] = {{"/v1/chat/completions", "openai"}, {"/v1/responses", "responses"},
                {"/v1/messages", "anthropic"}, {"/api/chat", "ollama"}};
    enum { N = 4 };
    int fds[N];
    for (int i = 0; i < N; i++) { /* stalled bodies first: their 408s come while the others run */
        char req[300];
        int k = snprintf(req, sizeof req,
                         "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         "Content-Length: 100\r\n\r\n{\"model\":",
                         apis[i].path);
        fds[i] = su_connect_from(NULL, port, 30, false);
        CHECK(fds[i] >= 0 && su_send_all(fds[i], req, (size_t)k) == 0);
    }
    for (int i = 0; i < N; i++) {
        char req[300];
        raw r;
        snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: 50000000\r\n\r\n", apis[i].path);
        raw_send(port, NULL, req, strlen(req), 30, &r);
        json_t *o = raw_json(&r);
        CHECK_MSG(r.status == 413 && error_shape_is(o, apis[i].api, "body_too_large", "request_too_large", "larger than the limit"),
                  "413 on %s: want %s's error shape: %.400s", apis[i].path, apis[i].api, r.text);
        json_decref(o);
        raw_free(&r);
        snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                 apis[i].path);
        raw_send(port, NULL, req, strlen(req), 30, &r);
        o = raw_json(&r);
        CHECK_MSG(r.status == 400 && error_shape_is(o, apis[i].api, "bad_content_length", "invalid_request_error", "Content-Length"),
                  "a framing 400 on %s: want %s's error shape: %.400s", apis[i].path, apis[i].api, r.text);
        json_decref(o);
        raw_free(&r);
    }
    for (int i = 0; i < N; i++) {
        raw r = {0};
        if (fds[i] >= 0) raw_read(fds[i], &r);
        json_t *o = r.text ? raw_json(&r) : NULL;
        CHECK_MSG(r.status == 408 && error_shape_is(o, apis[i].api, "request_timeout", "invalid_request_error", "did not arrive in time"),
                  "408 on %s: want %s's error shape: %.400s", apis[i].path, apis[i].api, r.text ? r.text : "");
        json_decref(o);
        raw_free(&r);
        if (fds[i] >= 0) close(fds[i]);
    }
}

/* Open descriptors of pid, or -1. */
static int proc_fds(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* An idle socket costs no thread: 500 of them, all accepted by C (its
 * descriptors show it), leave its thread count within a small constant of
 * what it was, and it serves /health and a completion meanwhile. */
static void check_idle_threads(srv *c) {
    enum { N = 500 };
    CHECK_EQ_INT(health_from(c->port, NULL, "localhost"), 200);
    int st = 0;
    json_t *o = post_json(c->port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(o);
    /* the connections of the requests above may still be closing: the
     * baseline is taken once the count holds still for 100 ms */
    int fds0 = proc_fds(c->pid);
    for (int prev = -1; fds0 != prev && fds0 >= 0; usleep(100000)) prev = fds0, fds0 = proc_fds(c->pid);
    int threads0 = proc_threads(c->pid);
    int fds[N], n_open = 0;
    for (int i = 0; i < N; i++) n_open += (fds[i] = su_connect_from(NULL, c->port, 5, true)) >= 0;
    CHECK_EQ_INT(n_open, N);
    int n_fds = 0;
    for (double t0 = su_now(); (n_fds = proc_fds(c->pid)) < fds0 + N - 2 && su_now() - t0 < 30;) usleep(50000);
    /* at most 2 fewer: the baseline may yet have counted a closing one */
    CHECK_MSG(n_fds >= fds0 + N - 2, "the server holds %d descriptors, %d before %d sockets were opened", n_fds, fds0,
              N);
    int threads1 = proc_threads(c->pid);
    CHECK_MSG(threads0 > 0 && threads1 <= threads0 + 2, "%d threads with %d idle sockets open, %d before", threads1, N,
              threads0);
    printf("  idle sockets: %d threads with %d open (%d before)\n", threads1, N, threads0);
    CHECK_EQ_INT(health_from(c->port, NULL, "localhost"), 200);
    o = post_json(c->port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(o);
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0) close(fds[i]);
}

/* B has --max-conns-per-ip 8 and a long header timeout. */
static void check_per_ip(int port) {
    int fds[12];
    for (int i = 0; i < 12; i++) fds[i] = su_connect_from("127.0.0.1", port, 5, false);
    /* 8 are held (waiting for headers), the rest and the next one from
     * 127.0.0.1 are closed at once; every loopback address is the same
     * client (test_server_isolation checks 127.0.0.2 and .3) */
    CHECK_MSG(health_from(port, "127.0.0.1", "localhost") != 200, "a 9th connection from 127.0.0.1 was served");
    for (int i = 0; i < 12; i++)
        if (fds[i] >= 0) close(fds[i]);
    int st = 0;
    for (double t0 = su_now(); st != 200 && su_now() - t0 < 15; usleep(50000)) st = health_from(port, "127.0.0.1", "localhost");
    CHECK_MSG(st == 200, "127.0.0.1 not served again after its sockets closed (%d)", st);
}

/* ---- 2. bodies ---- */

static void check_bodies(int port_a, int port_b) {
    /* B (--max-body 256K): 8 MB announced without a key: 401 from the
     * headers alone (before the size limit) */
    static const char head[] = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                               "Content-Length: 8388608\r\n\r\n";
    raw r;
    raw_send(port_b, NULL, head, sizeof head - 1, 20, &r);
    CHECK_MSG(r.status == 401, "unauthenticated 8 MB upload: status %d, want 401 before the body", r.status);
    CHECK_MSG(r.closed && strcasestr(r.text, "Connection: close"), "the 401 closes the connection: %.300s", r.text);
    raw_free(&r);
    /* the same with the key: the server waits for the body (no answer) */
    static const char head_key[] = "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sekret\r\n"
                                   "Content-Type: application/json\r\nContent-Length: 200000\r\n\r\n";
    int fd = su_connect_from(NULL, port_b, 1, false);
    CHECK(fd >= 0 && su_send_all(fd, head_key, sizeof head_key - 1) == 0);
    char c;
    CHECK_MSG(recv(fd, &c, 1, 0) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "with the key the body is awaited");
    close(fd);
    /* a small unauthenticated body: 401 too, in Anthropic's shape on its path */
    post_raw(port_b, "/v1/messages", NULL, "{\"model\":\"x\",\"max_tokens\":1,\"messages\":[]}", &r);
    CHECK_EQ_INT(r.status, 401);
    CHECK_MSG(strstr(r.text, "\"authentication_error\""), "%.300s", r.text);
    raw_free(&r);

    /* A: --max-body 1M --max-body-total 2M. Two 900000-byte partial
     * bodies held (kvloom_http_body_bytes shows when the server has read
     * them), then a 300000-byte body crosses 2 MB: 503; once the two are
     * gone, 200. */
    char *big = xmalloc(900000);
    memset(big, ' ', 900000);
    int held[2];
    for (int i = 0; i < 2; i++) {
        static const char h[] = "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                "Content-Length: 1000000\r\n\r\n";
        held[i] = su_connect_from(NULL, port_a, 10, false);
        CHECK(held[i] >= 0 && su_send_all(held[i], h, sizeof h - 1) == 0 && su_send_all(held[i], big, 900000) == 0);
    }
    double v = 0;
    for (double t0 = su_now(); v < 1800000 && su_now() - t0 < 20; usleep(20000)) v = metric(port_a, "kvloom_http_body_bytes");
    CHECK_MSG(v == 1800000, "kvloom_http_body_bytes %.0f with two 900000-byte bodies held", v);
    size_t nb = 300000;
    char *body = xmalloc(nb + 1);
    memset(body, ' ', nb);
    memcpy(body, "{\"tokens\":[]}", 13);
    body[nb] = 0;
    post_raw(port_a, "/detokenize", NULL, body, &r);
    CHECK_MSG(r.status == 503, "a third body while 1.8 MB of 2 MB are held: %d, want 503", r.status);
    CHECK_MSG(strstr(r.text, "\"server_busy\"") && strcasestr(r.text, "Retry-After: 1"), "%.400s", r.text);
    raw_free(&r);
    /* the same refusal under /api is in Ollama's shape ({"error": string}:
     * the ollama client printed [object Object] for an OpenAI object) */
    post_raw(port_a, "/api/chat", NULL, body, &r);
    CHECK_MSG(r.status == 503 && strstr(r.text, "{\"error\":\"") && !strstr(r.text, "\"type\""),
              "/api/chat while the bodies are held: want a 503 {\"error\": string}: %.400s", r.text);
    raw_free(&r);
    post_raw(port_a, "/v1/messages", NULL, body, &r); /* and in Anthropic's */
    json_t *ao = raw_json(&r);
    CHECK_MSG(r.status == 503 && error_shape_is(ao, "anthropic", NULL, "overloaded_error", "too many request bodies"),
              "/v1/messages while the bodies are held: want a 503 in Anthropic's shape: %.400s", r.text);
    json_decref(ao);
    raw_free(&r);
    for (int i = 0; i < 2; i++) close(held[i]);
    for (double t0 = su_now(); v > 0 && su_now() - t0 < 20; usleep(20000)) v = metric(port_a, "kvloom_http_body_bytes");
    CHECK_MSG(v == 0, "kvloom_http_body_bytes %.0f after the held bodies' clients left", v);
    post_raw(port_a, "/detokenize", NULL, body, &r);
    CHECK_MSG(r.status == 200, "the same body once the others are gone: %d, want 200", r.status);
    raw_free(&r);
    free(body);
    free(big);

    /* token arrays that expand: /detokenize over its cap, a prompt of more
     * JSON values than any request needs */
    sbuf b = {0};
    sbuf_put(&b, "{\"tokens\":[", 11);
    for (int i = 0; i < 70000; i++) sbuf_put(&b, i ? ",0" : "0", i ? 2 : 1);
    sbuf_put(&b, "]}", 2);
    post_raw(port_a, "/detokenize", NULL, b.p, &r);
    CHECK_EQ_INT(r.status, 400);
    CHECK_MSG(strstr(r.text, "70000 ids, more than the limit of 65536"), "%.300s", r.text);
    raw_free(&r);
    sbuf_free(&b);
    sbuf_put(&b, "{\"max_tokens\":1,\"prompt\":[", 26);
    for (int i = 0; i < 300000; i++) sbuf_put(&b, i ? ",1" : "1", i ? 2 : 1);
    sbuf_put(&b, "]}", 2);
    post_raw(port_a, "/v1/completions", NULL, b.p, &r);
    CHECK_EQ_INT(r.status, 400);
    CHECK_MSG(strstr(r.text, "more than 262144 JSON values"), "%.300s", r.text);
    raw_free(&r);
    sbuf_free(&b);
    CHECK_EQ_INT(health_from(port_a, NULL, "localhost"), 200);

    /* /detokenize text past --max-body (B: 256K): token 376 is " little",
     * 7 bytes for 4 of body; 40000 of them would be ~280 KB of text */
    for (int k = 0; k < 2; k++) {
        int n = k ? 40000 : 30000;
        sbuf_put(&b, "{\"tokens\":[", 11);
        for (int i = 0; i < n; i++) sbuf_put(&b, i ? ",376" : "376", i ? 4 : 3);
        sbuf_put(&b, "]}", 2);
        post_raw(port_b, "/detokenize", "Authorization: Bearer sekret\r\nContent-Type: application/json\r\n", b.p, &r);
        if (k) {
            CHECK_EQ_INT(r.status, 400);
            CHECK_MSG(strstr(r.text, "more than the limit of 262144"), "%.300s", r.text);
        } else {
            CHECK_EQ_INT(r.status, 200);
            CHECK_MSG(r.n > 200000, "30000 ids gave %zu bytes", r.n);
        }
        raw_free(&r);
        sbuf_free(&b);
    }
}

/* ---- 3. smuggling ---- */

static void check_smuggling(int port) {
    static const struct {
        const char *name, *req;
        int want;
    } cases[] = {
        {"conflicting Content-Length",
         "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 13\r\n"
         "Content-Length: 0\r\n\r\n{\"content\":1}",
         400},
        {"Content-Length with chunked",
         "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 45\r\n"
         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n",
         400},
        {"gzip transfer coding",
         "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n"
         "{\"content\":\"x\"}",
         501},
        {"gzip, chunked",
         "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
        {"space before the colon",
         "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length : 45\r\n\r\n"
         "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n",
         400},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        raw r;
        raw_send(port, NULL, cases[i].req, strlen(cases[i].req), 20, &r);
        CHECK_MSG(r.status == cases[i].want, "%s: status %d, want %d", cases[i].name, r.status, cases[i].want);
        CHECK_MSG(r.closed, "%s: the connection stays open", cases[i].name);
        CHECK_MSG(count_str(r.text, "HTTP/1.1 ") == 1, "%s: %d answers (a smuggled request was served)", cases[i].name,
                  count_str(r.text, "HTTP/1.1 "));
        raw_free(&r);
        CHECK_MSG(health_from(port, NULL, "localhost") == 200, "not serving after '%s'", cases[i].name);
    }
}

/* ---- 4. keys, hosts, forms, logs ---- */

static void check_security(srv *a, int port_b) {
    server_opts o;
    server_opts_default(&o);
    err_t e = {0};
    char *argv[] = {"--api-key", "", NULL};
    CHECK_EQ_INT(server_parse_args(2, argv, &o, &e), ERR_INVALID);
    CHECK_MSG(strstr(e.msg, "--api-key") && strstr(e.msg, "empty"), "%s", e.msg);
    char key_path[64];
    snprintf(key_path, sizeof key_path, "/tmp/kvloom_emptykey_%d", (int)getpid());
    FILE *kf = fopen(key_path, "w");
    if (kf) {
        fputs("\n", kf);
        fclose(kf);
    }
    char *argv_file[] = {"--api-key-file", key_path, NULL};
    server_opts_default(&o);
    memset(&e, 0, sizeof e);
    CHECK_EQ_INT(server_parse_args(2, argv_file, &o, &e), ERR_INVALID);
    CHECK_MSG(strstr(e.msg, "holds no key"), "%s", e.msg);
    unlink(key_path);

    /* A: loopback, no key, --allowed-hosts myhost.lan */
    int port = a->port;
    CHECK_EQ_INT(health_from(port, NULL, "evil.example"), 403);
    CHECK_EQ_INT(health_from(port, NULL, "evil.example:8080"), 403);
    CHECK_EQ_INT(health_from(port, NULL, "localhost.evil.example"), 403);
    CHECK_EQ_INT(health_from(port, NULL, "localhost:1234"), 200);
    CHECK_EQ_INT(health_from(port, NULL, "app.localhost"), 200);
    CHECK_EQ_INT(health_from(port, NULL, "127.0.0.1:80"), 200);
    CHECK_EQ_INT(health_from(port, NULL, "[::1]:80"), 200);
    CHECK_EQ_INT(health_from(port, NULL, "MyHost.lan:8080"), 200);
    raw r;
    static const char rebind[] = "POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n"
                                 "Connection: close\r\nContent-Length: 29\r\n\r\n{\"prompt\":\"a\",\"max_tokens\":1}";
    raw_send(port, NULL, rebind, sizeof rebind - 1, 20, &r);
    CHECK_EQ_INT(r.status, 403);
    CHECK_MSG(strstr(r.text, "\"host_not_allowed\""), "%.300s", r.text);
    raw_free(&r);
    /* B has a key: no Host check */
    CHECK_EQ_INT(health_from(port_b, "127.0.0.2", "evil.example"), 200);

    /* cross-site form posts (a browser sends Origin) are 415; curl -d
     * (urlencoded, no Origin) and JSON from a page are served */
    static const char body[] = "{\"prompt\":\"a\",\"max_tokens\":1}";
    static const struct {
        const char *headers;
        int want;
    } forms[] = {
        {"Origin: http://evil.example\r\nContent-Type: text/plain;charset=UTF-8\r\n", 415},
        {"Origin: http://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\n", 415},
        {"Origin: null\r\nContent-Type: multipart/form-data; boundary=x\r\n", 415},
        {"Content-Type: application/x-www-form-urlencoded\r\n", 200},
        {"Origin: http://127.0.0.1\r\nContent-Type: application/json\r\n", 200},
    };
    for (size_t i = 0; i < ARRAY_LEN(forms); i++) {
        post_raw(port, "/v1/completions", forms[i].headers, body, &r);
        CHECK_MSG(r.status == forms[i].want, "%s: %d, want %d", forms[i].headers, r.status, forms[i].want);
        if (forms[i].want == 200) {
            json_t *o = json_loads(strstr(r.text, "\r\n\r\n") ? strstr(r.text, "\r\n\r\n") + 4 : "", 0, NULL);
            CHECK_MSG(o && choice_text(o), "%s: no completion in %.300s", forms[i].headers, r.text);
            json_decref(o);
        }
        raw_free(&r);
    }

    /* a percent-encoded ESC and newline in the path reach the log escaped */
    static const char evil[] = "GET /%1b%5b31mEVIL%0aforged HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    raw_send(port, NULL, evil, sizeof evil - 1, 20, &r);
    CHECK_EQ_INT(r.status, 404);
    raw_free(&r);
    char *log = NULL;
    size_t n = 0;
    err_t le = {0};
    for (double t0 = su_now(); su_now() - t0 < 5; usleep(50000)) {
        free(log);
        log = NULL;
        if (file_read_all(a->log_path, &log, &n, &le) == 0 && strstr(log, "EVIL")) break;
    }
    CHECK_MSG(log && strstr(log, "GET /\\x1b[31mEVIL\\x0aforged 404"), "the path is not escaped in the log");
    CHECK_MSG(log && !memchr(log, 0x1b, n), "a raw ESC byte in the log");
    free(log);
}

/* ---- 5. routes ---- */

static void check_routes_minor(int port) {
    int st;
    json_t *o = get_json(port, "/models/stories260K", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(o, "id")), "stories260K");
    json_decref(o);
    o = get_json(port, "/models/other", &st);
    CHECK_EQ_INT(st, 404);
    json_decref(o);
    static const struct {
        const char *method, *path, *allow;
    } m405[] = {
        {"POST", "/v1/models/x", "GET"},      {"POST", "/health", "GET"},
        {"GET", "/v1/chat/completions", "POST"}, {"PUT", "/v1/messages", "POST"},
        {"DELETE", "/v1/models", "GET"},      {"POST", "/v1/responses/abc", "DELETE"},
    };
    for (size_t i = 0; i < ARRAY_LEN(m405); i++) {
        resp r;
        CHECK(http_do(port, m405[i].method, m405[i].path, NULL, NULL, &r) == 0);
        CHECK_MSG(r.status == 405, "%s %s: %d, want 405", m405[i].method, m405[i].path, r.status);
        const char *allow = r.head ? strcasestr(r.head, "\r\nAllow: ") : NULL;
        CHECK_MSG(allow && strstr(allow, m405[i].allow), "%s %s: no Allow header with %s: %s", m405[i].method,
                  m405[i].path, m405[i].allow, r.head ? r.head : "");
        resp_free(&r);
    }
    o = post_json(port, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":-1,\"max_completion_tokens\":5}", &st);
    CHECK_EQ_INT(st, 400);
    CHECK_STR(json_string_value(json_object_get(json_object_get(o, "error"), "param")), "max_tokens");
    json_decref(o);
    o = post_json(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[1]}", &st);
    CHECK_EQ_INT(st, 400);
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    CHECK_MSG(msg && strstr(msg, "tools[0]"), "tools: [1]: %s", msg ? msg : "(none)");
    json_decref(o);
}

/* ---- 5b. limits on request fields (docs/server.md "Limits") ---- */

/* Each limit past its bound: a 400 whose error names the field (param) and
 * whose message says what is wrong; the server serves the next request. */
static void check_limits(int port) {
    sbuf big = {0}; /* a stop string one byte over OAI_MAX_STOP_BYTES */
    for (int i = 0; i < 1025; i++) sbuf_put(&big, "x", 1);
    sbuf tools = {0}; /* 129 tools: one over TC_MAX_TOOLS */
    sbuf_printf(&tools, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[");
    for (int i = 0; i < 129; i++)
        sbuf_printf(&tools, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\",\"parameters\":{\"type\":\"object\"}}}",
                        i ? "," : "", i);
    sbuf_printf(&tools, "]}");
    sbuf longp = {0}; /* a prompt past the 2048-token context */
    sbuf_printf(&longp, "{\"prompt\":\"");
    for (int i = 0; i < 3000; i++) sbuf_printf(&longp, "Lily saw a dog. ");
    sbuf_printf(&longp, "\",\"max_tokens\":4}");
    char stop1[1200], stop2[1200];
    snprintf(stop1, sizeof stop1, "{\"prompt\":\"a\",\"max_tokens\":2,\"stop\":\"%.*s\"}", (int)big.n, big.p);
    snprintf(stop2, sizeof stop2, "{\"prompt\":\"a\",\"max_tokens\":2,\"stop\":[\"ok\",\"%.*s\"]}", (int)big.n, big.p);
    static const char chat_lp[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"logprobs\":true,"
                                  "\"top_logprobs\":21}";
    const struct {
        const char *name, *path, *body, *param, *msg;
    } cases[] = {
        {"n: 17", "/v1/completions", "{\"prompt\":\"a\",\"n\":17}", "n", "[1, 16]"},
        /* n > 1 streams since 299607f; best_of above n still cannot */
        {"best_of: 2 streamed", "/v1/completions", "{\"prompt\":\"a\",\"best_of\":2,\"stream\":true}", "best_of",
         "cannot be streamed"},
        {"n: 0", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"n\":0}", "n",
         "[1, "},
        {"logprobs: 21", "/v1/completions", "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", "[0, 20]"},
        {"top_logprobs: 21", "/v1/chat/completions", chat_lp, "top_logprobs", "[0, 20]"},
        {"17 stop strings", "/v1/completions",
         "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\","
         "\"14\",\"15\",\"16\",\"17\"]}",
         "stop", "at most 16"},
        {"a 1025-byte stop string", "/v1/completions", stop1, "stop", "at most 1024"},
        {"a 1025-byte stop[1]", "/v1/completions", stop2, "stop", "'stop[1]' has 1025 bytes"},
        {"129 tools", "/v1/chat/completions", tools.p, "tools", "at most 128"},
        {"a prompt past the context", "/v1/completions", longp.p, "prompt", "context is 2048 tokens"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        int st = 0;
        json_t *o = post_json(port, cases[i].path, cases[i].body, &st);
        json_t *err = json_object_get(o, "error");
        const char *param = json_string_value(json_object_get(err, "param"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        CHECK_MSG(st == 400 && param && !strcmp(param, cases[i].param) && msg && strstr(msg, cases[i].msg),
                  "%s: %d param %s message %s", cases[i].name, st, param ? param : "(none)", msg ? msg : "(none)");
        json_decref(o);
        CHECK_MSG(health_from(port, NULL, "localhost") == 200, "not serving after '%s'", cases[i].name);
    }
    /* at the bounds: accepted */
    char ok[1200];
    snprintf(ok, sizeof ok, "{\"prompt\":\"a\",\"max_tokens\":2,\"stop\":\"%.*s\"}", 1024, big.p);
    int st = 0;
    json_t *o = post_json(port, "/v1/completions", ok, &st);
    CHECK_MSG(st == 200, "a 1024-byte stop string: %d", st);
    json_decref(o);
    /* max_tokens past what the context leaves is not an error: the
     * generation stops at the context ("length"), as llama-server does (the
     * last sampled token needs no position: prompt + completion <= ctx + 1) */
    o = post_json(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":100000,\"ignore_eos\":true}", &st);
    CHECK_MSG(st == 200 && choice_finish(o) && !strcmp(choice_finish(o), "length") &&
                  usage_int(o, "prompt_tokens") + usage_int(o, "completion_tokens") <= 2049,
              "max_tokens 100000: %d", st);
    json_decref(o);
    sbuf_free(&big);
    sbuf_free(&tools);
    sbuf_free(&longp);
}

/* ---- 6. the table ---- */

static void check_table(int port) {
#define H "Host: localhost\r\n"
#define JSON_POST(path, body)                                                                                          \
    "POST " path " HTTP/1.1\r\n" H "Connection: close\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n" body
#define BODY(s) s, sizeof s - 1
#define NUL_PATH "GET /he\0alth HTTP/1.1\r\n" H "Connection: close\r\n\r\n"
    static const struct {
        const char *name;
        const char *req; /* "%zu" (if any) gets the length of `body` */
        const char *body;
        size_t n_body;
        int want; /* 0: closed without an answer */
    } cases[] = {
        {"no spaces in the request line", "GARBAGE\r\n\r\n", NULL, 0, 0},
        {"no HTTP version", "GET /health\r\n\r\n", NULL, 0, 400},
        {"HTTP/9.9", "GET /health HTTP/9.9\r\n" H "\r\n", NULL, 0, 505},
        {"a header line without a colon", "GET /health HTTP/1.1\r\n" H "NoColonHere\r\n\r\n", NULL, 0, 400},
        {"a space in a header name", "GET /health HTTP/1.1\r\n" H "Bad Name: x\r\n\r\n", NULL, 0, 400},
        {"Content-Length -1", "POST /tokenize HTTP/1.1\r\n" H "Content-Length: -1\r\n\r\n", NULL, 0, 400},
        {"Content-Length 10^23", "POST /tokenize HTTP/1.1\r\n" H "Content-Length: 99999999999999999999999\r\n\r\n", NULL, 0,
         413},
        {"Content-Length abc", "POST /tokenize HTTP/1.1\r\n" H "Content-Length: abc\r\n\r\n", NULL, 0, 400},
        {"Content-Length 1e3", "POST /tokenize HTTP/1.1\r\n" H "Content-Length: 1e3\r\n\r\n", NULL, 0, 400},
        {"Content-Length over 4x --max-body", "POST /tokenize HTTP/1.1\r\n" H "Content-Length: 50000000\r\n\r\n", NULL, 0,
         413},
        {"chunk size zz", "POST /tokenize HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", NULL, 0,
         400},
        {"chunk size -2", "POST /tokenize HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n", NULL, 0,
         400},
        {"chunk size 2^80", "POST /tokenize HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n{}\r\n",
         NULL, 0, 413},
        {"invalid UTF-8", JSON_POST("/tokenize", "%s"), BODY("{\"content\":\"\xff\xfe\"}"), 400},
        {"a raw NUL in a string", JSON_POST("/tokenize", "%s"), BODY("{\"content\":\"a\0b\"}"), 400},
        {"\\u0000", JSON_POST("/tokenize", "%s"), BODY("{\"content\":\"a\\u0000b\"}"), 400},
        {"a NUL in the path", NUL_PATH, NULL, 0, 404},
        {"not an object", JSON_POST("/v1/completions", "%s"), BODY("[]"), 400},
        {"prompt: 5", JSON_POST("/v1/completions", "%s"), BODY("{\"prompt\":5}"), 400},
        {"messages: \"x\"", JSON_POST("/v1/chat/completions", "%s"), BODY("{\"messages\":\"x\"}"), 400},
        {"max_tokens: \"5\"", JSON_POST("/v1/completions", "%s"), BODY("{\"prompt\":\"a\",\"max_tokens\":\"5\"}"), 400},
        {"temperature: \"hot\"", JSON_POST("/v1/completions", "%s"), BODY("{\"prompt\":\"a\",\"temperature\":\"hot\"}"), 400},
        {"tokens: \"x\"", JSON_POST("/detokenize", "%s"), BODY("{\"tokens\":\"x\"}"), 400},
        {"tokens: [-1]", JSON_POST("/detokenize", "%s"), BODY("{\"tokens\":[-1]}"), 400},
        {"stream: 1", JSON_POST("/v1/completions", "%s"), BODY("{\"prompt\":\"a\",\"stream\":1}"), 400},
        {"a truncated body", JSON_POST("/tokenize", "%s"), BODY("{\"content\":"), 400},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        /* the request: `req` up to "%zu", the body length, the rest, the body */
        sbuf b = {0};
        const char *req = cases[i].req;
        size_t n_req = strlen(req);
        if (!strcmp(cases[i].name, "a NUL in the path")) n_req = sizeof NUL_PATH - 1;
        const char *fmt = cases[i].body ? strstr(req, "%zu") : NULL;
        if (fmt) {
            sbuf_put(&b, req, (size_t)(fmt - req));
            sbuf_printf(&b, "%zu", cases[i].n_body);
            const char *rest = fmt + 3;
            const char *s = strstr(rest, "%s");
            sbuf_put(&b, rest, (size_t)(s - rest));
            sbuf_put(&b, cases[i].body, cases[i].n_body);
        } else {
            sbuf_put(&b, req, n_req);
        }
        raw r;
        raw_send(port, NULL, b.p, b.n, 20, &r);
        CHECK_MSG(r.status == cases[i].want, "%s: status %d, want %d (%.200s)", cases[i].name, r.status, cases[i].want,
                  r.text);
        CHECK_MSG(r.closed, "%s: the server kept the connection", cases[i].name);
        raw_free(&r);
        sbuf_free(&b);
        CHECK_MSG(health_from(port, NULL, "localhost") == 200, "not serving after '%s'", cases[i].name);
    }
    /* generated ones: a 70 KB header, a 70 KB path, nesting 10000 deep */
    sbuf b = {0};
    sbuf_printf(&b, "GET /health HTTP/1.1\r\n" H "X-Big: ");
    for (int i = 0; i < 70000; i++) sbuf_put(&b, "a", 1);
    sbuf_printf(&b, "\r\n\r\n");
    raw r;
    raw_send(port, NULL, b.p, b.n, 20, &r);
    CHECK_MSG(r.status == 431, "a 70 KB header: %d, want 431", r.status);
    raw_free(&r);
    sbuf_free(&b);
    sbuf_printf(&b, "GET /");
    for (int i = 0; i < 70000; i++) sbuf_put(&b, "a", 1);
    sbuf_printf(&b, " HTTP/1.1\r\n" H "\r\n");
    raw_send(port, NULL, b.p, b.n, 20, &r);
    CHECK_MSG(r.status == 414, "a 70 KB path: %d, want 414", r.status);
    raw_free(&r);
    sbuf_free(&b);
    for (int i = 0; i < 10000; i++) sbuf_put(&b, "[", 1);
    for (int i = 0; i < 10000; i++) sbuf_put(&b, "]", 1);
    char *deep = xstrndup(b.p, b.n);
    char *obj = xmalloc(b.n + 64);
    snprintf(obj, b.n + 64, "{\"prompt\":%s}", deep);
    post_raw(port, "/v1/completions", NULL, obj, &r);
    CHECK_MSG(r.status == 400 && strstr(r.text, "depth"), "nesting 10000: %d %.200s", r.status, r.text);
    raw_free(&r);
    free(obj);
    free(deep);
    sbuf_free(&b);
    CHECK_EQ_INT(health_from(port, NULL, "localhost"), 200);
#undef H
#undef JSON_POST
#undef BODY
#undef NUL_PATH
}

int main(void) {
    (void)sse_text; /* server_util.h helpers of the generation tests */
    (void)choice_finish;
    (void)usage_int;
    su_watchdog(240);
    const char *flags_a[] = {"--header-timeout", "2", "--timeout", "600", "--max-connections", "64", "--max-body", "1M",
                             "--max-body-total", "2M", "--allowed-hosts", "myhost.lan", "-t", "1", NULL};
    const char *flags_b[] = {"--api-key", "sekret", "--max-conns-per-ip", "8", "--header-timeout", "30", "--timeout", "3",
                             "--max-body", "256K", "-t", "1", NULL};
    int rc = srv_start(&g_a, flags_a);
    CHECK_MSG(rc == 0, "server A did not start");
    int rc_b = srv_start(&g_b, flags_b);
    CHECK_MSG(rc_b == 0, "server B did not start");
    const char *flags_c[] = {"--header-timeout", "60", "--kv-mem", "16M", "-t", "1", NULL};
    int rc_c = srv_start(&g_c, flags_c);
    CHECK_MSG(rc_c == 0, "server C did not start");
    if (rc != 0 || rc_b != 0 || rc_c != 0) {
        srv_print_log(&g_a);
        srv_print_log(&g_b);
        srv_print_log(&g_c);
        su_kill_all();
        return test_summary("test_server_hardening");
    }
    check_table(g_a.port);
    check_smuggling(g_a.port);
    check_security(&g_a, g_b.port);
    check_routes_minor(g_a.port);
    check_limits(g_a.port);
    check_bodies(g_a.port, g_b.port);
    check_per_ip(g_b.port);
    check_keepalive(g_a.port, g_b.port);
    check_408(g_a.port);
    check_transport_shapes(g_a.port);
    check_idle_threads(&g_c);
    check_flood(g_a.port);
    CHECK(wait_idle(g_a.port, 10)); /* nothing left running or holding blocks */
    if (test_n_fail) {
        srv_print_log(&g_a);
        srv_print_log(&g_b);
        srv_print_log(&g_c);
    }
    CHECK_EQ_INT(srv_stop(&g_a), 0);
    CHECK_EQ_INT(srv_stop(&g_b), 0);
    CHECK_EQ_INT(srv_stop(&g_c), 0);
    return test_summary("test_server_hardening");
}
