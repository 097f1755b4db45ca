/*
 * server_util.h — helpers for the server tests: start `kvloom serve` as a
 * child process (fork + server_main, so the test does not depend on the CLI),
 * talk to it over real sockets on 127.0.0.1 with hard timeouts, and always
 * kill it at the end (a watchdog alarm kills it if the test hangs).
 * The server's log (/tmp/kvloom_srv_<pid>_<n>.log) is printed when it did
 * not stop cleanly, and removed otherwise unless SU_KEEP_LOG is set.
 *
 * Included by tests/test_server_*.c only (static functions).
 */
#ifndef KVLOOM_SERVER_UTIL_H
#define KVLOOM_SERVER_UTIL_H

/* Sweeps of many requests of one kind (every value of a body replaced by
 * each JSON type...) send every case in the normal build, and every
 * SU_SWEEP_STRIDE-th under AddressSanitizer or ThreadSanitizer, which make
 * each request several times dearer: the sanitizer still sees each path the
 * sweep reaches, with rotating cases, at a fraction of the suite's time. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SU_SWEEP_STRIDE 4
#else
#define SU_SWEEP_STRIDE 1
#endif

/* Under ThreadSanitizer the server runs 5-15x slower (a start with the
 * default 256 MB KV pool takes 10-40 s on a loaded machine): the watchdog
 * and the wait for a server to listen are SU_SLOWDOWN times longer. */
#if defined(__SANITIZE_THREAD__)
#define SU_SLOWDOWN 4
#else
#define SU_SLOWDOWN 1
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "server/server.h"
#include "test.h"

typedef struct srv {
    pid_t pid;
    int port;
    char log_path[256];
    char ready_path[256];
} srv;

static srv *su_live[8];

static void su_kill_all(void) {
    for (int i = 0; i < 8; i++)
        if (su_live[i] && su_live[i]->pid > 0) kill(su_live[i]->pid, SIGKILL);
}

static void su_on_alarm(int sig) {
    (void)sig;
    su_kill_all();
    static const char m[] = "FAIL: watchdog timeout, server killed\n";
    if (write(2, m, sizeof m - 1) < 0) {}
    _exit(3);
}

/* Arms a watchdog for the whole test. */
static void su_watchdog(int seconds) {
    signal(SIGALRM, su_on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)(seconds * SU_SLOWDOWN));
}

/* /proc/PID/status Threads, or -1. */
static inline int proc_threads(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

static double su_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Starts a server with extra flags (NULL-terminated; without -m among them
 * the model is stories260K). Returns 0 when it is listening (its port is in
 * s->port). */
static int srv_start(srv *s, const char *const *flags) {
    memset(s, 0, sizeof *s);
    static int n_started;
    snprintf(s->log_path, sizeof s->log_path, "/tmp/kvloom_srv_%d_%d.log", (int)getpid(), n_started);
    snprintf(s->ready_path, sizeof s->ready_path, "/tmp/kvloom_srv_%d_%d.port", (int)getpid(), n_started++);
    unlink(s->ready_path);
    static char model[512];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", test_shared_dir());
    const char *argv[64];
    int argc = 0;
    bool own_model = false; /* the flags' -m replaces stories260K (two -m serve two models) */
    for (int i = 0; flags && flags[i]; i++) own_model |= !strcmp(flags[i], "-m") || !strcmp(flags[i], "--model");
    if (!own_model) {
        argv[argc++] = "-m";
        argv[argc++] = model;
    }
    argv[argc++] = "--port";
    argv[argc++] = "0";
    argv[argc++] = "--ready-file";
    argv[argc++] = s->ready_path;
    argv[argc++] = "-t";
    argv[argc++] = "2";
    for (int i = 0; flags && flags[i] && argc < 62; i++) argv[argc++] = flags[i];
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen(s->log_path, "w", stderr);
        (void)f;
        setvbuf(stderr, NULL, _IONBF, 0); /* freopen made it fully buffered: keep the log readable while serving */
        alarm(0);
        signal(SIGALRM, SIG_DFL);
        server_opts o;
        server_opts_default(&o);
        err_t e = {0};
        if (server_parse_args(argc, (char **)argv, &o, &e) != 0) {
            fprintf(stderr, "args: %s\n", e.msg);
            _exit(2);
        }
        int rc = server_main(&o);
        exit(rc < 0 ? 1 : 0);
    }
    s->pid = pid;
    for (int i = 0; i < 8; i++)
        if (!su_live[i]) {
            su_live[i] = s;
            break;
        }
    double t0 = su_now();
    while (su_now() - t0 < 30 * SU_SLOWDOWN) {
        FILE *f = fopen(s->ready_path, "r");
        if (f) {
            int port = 0;
            int ok = fscanf(f, "%d", &port) == 1 && port > 0;
            fclose(f);
            if (ok) {
                s->port = port;
                return 0;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        usleep(10000);
    }
    return -1;
}

static void srv_print_log(const srv *s) {
    FILE *f = fopen(s->log_path, "r");
    if (!f) return;
    char line[1024];
    fprintf(stderr, "---- server log %s (tail) ----\n", s->log_path);
    long n = 0;
    while (fgets(line, sizeof line, f)) n++;
    rewind(f);
    long i = 0;
    while (fgets(line, sizeof line, f))
        if (i++ >= n - 40) fputs(line, stderr);
    fclose(f);
}

/* SIGTERM, wait (up to 20 s), then SIGKILL. Returns the exit status (0 clean),
 * or -1 if it had to be killed. */
static int srv_stop(srv *s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    double t0 = su_now();
    int st = 0, rc = -1;
    while (su_now() - t0 < 20) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            break;
        }
        usleep(10000);
    }
    if (rc == -1) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
    }
    for (int i = 0; i < 8; i++)
        if (su_live[i] == s) su_live[i] = NULL;
    s->pid = 0;
    if (rc != 0)
        srv_print_log(s);
    else
        if (!getenv("SU_KEEP_LOG")) unlink(s->log_path);
    unlink(s->ready_path);
    return rc;
}

/* ---- a tiny HTTP/1.1 client (Connection: close) ---- */

typedef struct resp {
    int status;
    char *head; /* status line + headers */
    char *body; /* de-chunked, NUL-terminated */
    size_t n;
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* A socket connected (or connecting, when nonblock) to 127.0.0.1:port from
 * the source address src (NULL: any), with send and receive timeouts. */
static inline int su_connect_from(const char *src, int port, int timeout_s, bool nonblock) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (src) {
        struct sockaddr_in b = {0};
        b.sin_family = AF_INET;
        inet_pton(AF_INET, src, &b.sin_addr);
        if (bind(fd, (struct sockaddr *)&b, sizeof b) < 0) {
            close(fd);
            return -1;
        }
    }
    if (nonblock) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && !(nonblock && errno == EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int su_connect(int port, int timeout_s) { return su_connect_from(NULL, port, timeout_s, false); }

static int su_send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Sends a request; returns the connected fd (response unread) or -1. */
static int su_send_request(int port, const char *method, const char *path, const char *headers, const char *body,
                           size_t n, int timeout_s) {
    int fd = su_connect(port, timeout_s);
    if (fd < 0) return -1;
    char head[1024];
    int k = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%sContent-Length: %zu\r\n\r\n",
                     method, path, headers ? headers : "", body ? "Content-Type: application/json\r\n" : "",
                     body ? n : (size_t)0);
    if (su_send_all(fd, head, (size_t)k) < 0 || (body && n && su_send_all(fd, body, n) < 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void su_dechunk(resp *r, char *raw, size_t n) {
    /* raw: body bytes after the header; chunked if the header says so */
    if (!strcasestr(r->head, "transfer-encoding: chunked")) {
        r->body = xmalloc(n + 1);
        memcpy(r->body, raw, n);
        r->body[n] = 0;
        r->n = n;
        return;
    }
    r->body = xmalloc(n + 1);
    size_t o = 0, i = 0;
    while (i < n) {
        char *end;
        unsigned long len = strtoul(raw + i, &end, 16);
        char *crlf = strstr(raw + i, "\r\n");
        if (!crlf) break;
        (void)end;
        i = (size_t)(crlf - raw) + 2;
        if (len == 0 || i + len > n) break;
        memcpy(r->body + o, raw + i, len);
        o += len;
        i += len + 2;
    }
    r->body[o] = 0;
    r->n = o;
}

/* Reads the whole response from fd (until close) and closes it. */
static int su_read_response(int fd, resp *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 65536, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = xrealloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep) {
        free(buf);
        return -1;
    }
    r->head = xstrndup(buf, (size_t)(sep - buf));
    if (sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) r->status = -1;
    su_dechunk(r, sep + 4, n - (size_t)(sep + 4 - buf));
    free(buf);
    return 0;
}

/* Reads from fd until `needle` has been seen (true) or timeout_s passed,
 * the peer closed, or 64 KB were read (false). */
static inline bool su_read_until(int fd, const char *needle, double timeout_s) {
    static char buf[65536];
    size_t got = 0;
    double t0 = su_now();
    while (fd >= 0 && got < sizeof buf - 1 && su_now() - t0 < timeout_s) {
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
        buf[got] = 0;
        if (strstr(buf, needle)) return true;
    }
    return false;
}

static int http_do(int port, const char *method, const char *path, const char *headers, const char *body, resp *r) {
    memset(r, 0, sizeof *r);
    int fd = su_send_request(port, method, path, headers, body, body ? strlen(body) : 0, 120);
    if (fd < 0) return -1;
    return su_read_response(fd, r);
}

/* POST json, parse the JSON answer (NULL if not JSON); *status set. */
static inline json_t *post_json(int port, const char *path, const char *body, int *status) {
    resp r;
    *status = -1;
    if (http_do(port, "POST", path, NULL, body, &r) < 0) return NULL;
    *status = r.status;
    json_t *o = json_loads(r.body, 0, NULL);
    resp_free(&r);
    return o;
}

static inline json_t *get_json(int port, const char *path, int *status) {
    resp r;
    *status = -1;
    if (http_do(port, "GET", path, NULL, NULL, &r) < 0) return NULL;
    *status = r.status;
    json_t *o = json_loads(r.body, 0, NULL);
    resp_free(&r);
    return o;
}

/* The text of choices[0] (completions "text" or chat message content). */
static const char *choice_text(json_t *o) {
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t) t = json_object_get(json_object_get(c, "message"), "content");
    return json_string_value(t);
}

static const char *choice_finish(json_t *o) {
    return json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "finish_reason"));
}

static long usage_int(json_t *o, const char *k) {
    json_t *u = json_object_get(o, "usage");
    if (!strcmp(k, "cached_tokens")) u = json_object_get(u, "prompt_tokens_details");
    json_t *v = json_object_get(u, k);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

/* Extra headers for metric() / wait_idle() (an API key), or NULL. */
static const char *su_metrics_headers;

/* A metric's value from /metrics (-1 when missing). */
static double metric(int port, const char *name) {
    resp r;
    if (http_do(port, "GET", "/metrics", su_metrics_headers, NULL, &r) < 0) return -1;
    double v = -1;
    size_t ln = strlen(name);
    for (char *p = r.body; p && *p;) {
        if (!strncmp(p, name, ln) && p[ln] == ' ') {
            v = strtod(p + ln + 1, NULL);
            break;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
    resp_free(&r);
    return v;
}

/* Waits until no request runs or waits and no block is held outside the
 * prefix cache (used == cached + the pins' partial last blocks, which the
 * tree does not index). Returns true when reached within timeout_s. */
static bool wait_idle(int port, double timeout_s) {
    double t0 = su_now();
    while (su_now() - t0 < timeout_s) {
        double tails = metric(port, "kvloom_kv_pinned_partial_blocks");
        if (metric(port, "kvloom_requests_running") == 0 && metric(port, "kvloom_requests_waiting") == 0 &&
            metric(port, "kvloom_kv_blocks_used") == metric(port, "kvloom_kv_blocks_cached") + (tails > 0 ? tails : 0))
            return true;
        usleep(20000);
    }
    resp r;
    if (http_do(port, "GET", "/metrics", su_metrics_headers, NULL, &r) == 0) {
        fprintf(stderr, "wait_idle: not idle after %.0f s:\n", timeout_s);
        for (char *p = strtok(r.body, "\n"); p; p = strtok(NULL, "\n"))
            if (p[0] != '#' && !strstr(p, "_bucket")) fprintf(stderr, "  %s\n", p);
        resp_free(&r);
    }
    return false;
}

/* One event of a typed SSE stream (Anthropic's, Responses'). */
typedef struct sse_ev {
    char type[64];
    json_t *data;
} sse_ev;

/* Parses "event: T\ndata: J\n\n" records into evs (at most cap); checks
 * that T is J's "type". Returns the count (free with sse_events_free). */
static inline int sse_events(const char *body, sse_ev *evs, int cap) {
    int n = 0;
    for (const char *p = body; p && *p && n < cap;) {
        const char *ev = strstr(p, "event: ");
        if (!ev) break;
        const char *nl = strchr(ev, '\n');
        if (!nl || strncmp(nl + 1, "data: ", 6)) {
            CHECK_MSG(0, "event without data at %zu", (size_t)(ev - body));
            break;
        }
        const char *d = nl + 7, *end = strstr(d, "\n\n");
        if (!end) break;
        snprintf(evs[n].type, sizeof evs[n].type, "%.*s", (int)(nl - ev - 7), ev + 7);
        evs[n].data = json_loadb(d, (size_t)(end - d), 0, NULL);
        const char *t = json_string_value(json_object_get(evs[n].data, "type"));
        CHECK_MSG(evs[n].data && t && !strcmp(t, evs[n].type), "event %s: data type %s", evs[n].type,
                  evs[n].data ? (t ? t : "(none)") : "(bad JSON)");
        n++;
        p = end + 2;
    }
    return n;
}

static inline void sse_events_free(sse_ev *evs, int n) {
    for (int i = 0; i < n; i++) json_decref(evs[i].data);
}

/* Concatenates the text of an SSE stream body (completions or chat); sets
 * *done when "data: [DONE]" ended it, *usage to the usage object if any
 * (new reference), *finish to the last finish_reason (static buffer). */
static char *sse_text(const char *body, bool *done, json_t **usage, char *finish, size_t finish_cap) {
    size_t cap = strlen(body) + 1, n = 0;
    char *out = xmalloc(cap);
    out[0] = 0;
    *done = false;
    if (usage) *usage = NULL;
    if (finish) finish[0] = 0;
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end) break;
        if (!strncmp(p, "[DONE]", 6)) {
            *done = true;
            break;
        }
        json_t *o = json_loadb(p, (size_t)(end - p), 0, NULL);
        if (o) {
            json_t *c = json_array_get(json_object_get(o, "choices"), 0);
            json_t *t = json_object_get(c, "text");
            if (!t) t = json_object_get(json_object_get(c, "delta"), "content");
            if (json_is_string(t)) {
                size_t k = json_string_length(t);
                memcpy(out + n, json_string_value(t), k);
                n += k;
                out[n] = 0;
            }
            json_t *fr = json_object_get(c, "finish_reason");
            if (finish && json_is_string(fr)) snprintf(finish, finish_cap, "%s", json_string_value(fr));
            json_t *u = json_object_get(o, "usage");
            if (usage && json_is_object(u)) {
                if (*usage) json_decref(*usage);
                *usage = json_incref(u);
            }
            json_decref(o);
        }
        p = end;
    }
    return out;
}

#endif
