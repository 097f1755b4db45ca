/*
 * test_fault_alloc.c — allocation failures on the request path: the real
 * server (fork + server_main, tests/server_util.h) is made to fail its Nth
 * allocation while one request runs, for every N from 1 to the number of
 * allocations that request makes (counted first by a dry run). Each request
 * must end either in success with the reference output or in a clean error
 * (500/503 with a JSON error object, or an SSE error event) — never a 4xx
 * (the request was valid), a crash, a hang or a leak — and the next request,
 * without a fault, must give the reference output again. At the end the
 * server must be idle (no KV block held outside the prefix cache) and exit
 * cleanly (under ASan, LeakSanitizer fails the exit on any leak).
 *
 * The hook. This binary alone is linked with -Wl,--wrap=malloc,calloc,
 * realloc and --wrap of the x-functions (Makefile): every allocation that
 * libkvloom.a makes goes through the wrappers below, and so do jansson's
 * (the server installs its counting allocator, oai_json_init, whose malloc
 * is wrapped too). The release build is untouched. The
 * counters live in a shared anonymous page, so the test process arms the
 * server child between requests; only allocations in the server process
 * while armed are counted.
 *
 * What is not failed: xmalloc & co (base.h) abort on failure by design — they
 * are for sizes the program chose — so allocations made inside them are
 * counted apart (n_exempt) and never failed; libmicrohttpd's and libc's own
 * allocations are not hooked. What is failed: every plain malloc / calloc /
 * realloc of src/ and every jansson allocation (parsing the body, building
 * the answer) — the paths that turn NULL into ERR_NOMEM.
 *
 * KVLOOM_FAULT_FULL=1 sweeps every N; by default (make test's short form)
 * every second N is taken, every fifth under ASan, the offset rotating per
 * kind so that successive kinds reach different allocations.
 * KVLOOM_FAULT_AT=N fails only allocation N of each kind (to debug one);
 * KVLOOM_FAULT_TRACE=1 writes each failed allocation's stack to the server
 * log (kept when the test fails).
 */
#include <execinfo.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "server_util.h"

/* ---- the hook ---- */

typedef struct fa_ctl {
    atomic_long server_pid; /* only this process counts                          */
    atomic_long armed;      /* 1 while a request runs under the fault            */
    atomic_long fail_at;    /* 1-based index of the allocation to fail; 0 = none */
    atomic_long n_counted;  /* failable allocations seen while armed             */
    atomic_long n_failed;   /* allocations failed                                */
    atomic_long n_exempt;   /* allocations inside xmalloc & co (never failed)    */
} fa_ctl;

static fa_ctl *fa;
static bool fa_trace; /* KVLOOM_FAULT_TRACE=1 */
static _Thread_local int fa_in_x;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_xmalloc(size_t n);
void *__real_xcalloc(size_t n, size_t size);
void *__real_xrealloc(void *p, size_t n);
char *__real_xstrdup(const char *s);
char *__real_xstrndup(const char *s, size_t n);
void *__real_xaligned_alloc(size_t n);

/* True when this allocation is to fail. */
static bool fa_fail_now(void) {
    if (!fa || !atomic_load(&fa->armed) || atomic_load(&fa->server_pid) != (long)getpid()) return false;
    if (fa_in_x) {
        atomic_fetch_add(&fa->n_exempt, 1);
        return false;
    }
    long k = atomic_fetch_add(&fa->n_counted, 1) + 1;
    if (k != atomic_load(&fa->fail_at)) return false;
    atomic_fetch_add(&fa->n_failed, 1);
    if (fa_trace) { /* the failing caller's stack, into the server's log */
        void *pcs[24];
        backtrace_symbols_fd(pcs, backtrace(pcs, 24), 2);
    }
    return true;
}

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) { return fa_fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fa_fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fa_fail_now() ? NULL : __real_realloc(p, n); }

#define FA_EXEMPT(call)                                                                                                \
    do {                                                                                                               \
        fa_in_x++;                                                                                                     \
        void *r_ = (void *)(call);                                                                                     \
        fa_in_x--;                                                                                                     \
        return r_;                                                                                                     \
    } while (0)
void *__wrap_xmalloc(size_t n);
void *__wrap_xcalloc(size_t n, size_t size);
void *__wrap_xrealloc(void *p, size_t n);
char *__wrap_xstrdup(const char *s);
char *__wrap_xstrndup(const char *s, size_t n);
void *__wrap_xaligned_alloc(size_t n);
void *__wrap_xmalloc(size_t n) { FA_EXEMPT(__real_xmalloc(n)); }
void *__wrap_xcalloc(size_t n, size_t size) { FA_EXEMPT(__real_xcalloc(n, size)); }
void *__wrap_xrealloc(void *p, size_t n) { FA_EXEMPT(__real_xrealloc(p, n)); }
char *__wrap_xstrdup(const char *s) { FA_EXEMPT(__real_xstrdup(s)); }
char *__wrap_xstrndup(const char *s, size_t n) { FA_EXEMPT(__real_xstrndup(s, n)); }
void *__wrap_xaligned_alloc(size_t n) { FA_EXEMPT(__real_xaligned_alloc(n)); }


static void fa_arm(long fail_at) {
    atomic_store(&fa->n_counted, 0);
    atomic_store(&fa->n_failed, 0);
    atomic_store(&fa->n_exempt, 0);
    atomic_store(&fa->fail_at, fail_at);
    atomic_store(&fa->armed, 1);
}
static void fa_disarm(void) { atomic_store(&fa->armed, 0); }

/* ---- the requests ---- */

typedef struct kind {
    const char *name, *path, *body;
    bool stream;
    bool ndjson; /* Ollama's stream: one JSON object a line, the last "done": true */
    bool anthropic_sse; /* Anthropic's stream: content_block_delta events, then message_stop */
    char *ref;    /* the reference text                           */
    long n_alloc; /* failable allocations of one request (dry run) */
    long n_exempt;
    int n_ok, n_err, n_bad; /* sweep outcomes */
} kind;

/* The text of a 200 answer (NULL when there is none), or the error seen. */
/* The text of an Ollama NDJSON stream (NULL unless a line says done: true);
 * *error set when a line is an error. */
static char *ndjson_text(const char *body, bool *error) {
    struct { char *p; size_t n; } out = {0};
    bool done = false;
    *error = false;
    for (const char *p = body; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_t *o = json_loadb(p, n, 0, NULL);
        if (json_object_get(o, "error")) *error = true;
        json_t *t = json_object_get(json_object_get(o, "message"), "content");
        if (!t) t = json_object_get(o, "response");
        if (json_is_string(t)) {
            out.p = xrealloc(out.p, out.n + json_string_length(t) + 1);
            memcpy(out.p + out.n, json_string_value(t), json_string_length(t));
            out.n += json_string_length(t);
            out.p[out.n] = 0;
        }
        if (json_is_true(json_object_get(o, "done"))) done = true;
        json_decref(o);
        p += n + (nl ? 1 : 0);
    }
    if (!done || !out.p) {
        free(out.p);
        return done ? xstrdup("") : NULL;
    }
    return out.p;
}

/* The text of an Anthropic SSE stream (NULL unless message_stop came);
 * *error set on an error event. */
static char *anthropic_sse_text(const char *body, bool *error) {
    struct { char *p; size_t n; } out = {0};
    bool done = false;
    *error = strstr(body, "event: error") != NULL;
    for (const char *p = body; (p = strstr(p, "data: "));) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end) break;
        json_t *o = json_loadb(p, (size_t)(end - p), 0, NULL);
        const char *type = json_string_value(json_object_get(o, "type"));
        json_t *t = json_object_get(json_object_get(o, "delta"), "text");
        if (type && !strcmp(type, "content_block_delta") && json_is_string(t)) {
            out.p = xrealloc(out.p, out.n + json_string_length(t) + 1);
            memcpy(out.p + out.n, json_string_value(t), json_string_length(t));
            out.n += json_string_length(t);
            out.p[out.n] = 0;
        }
        if (type && !strcmp(type, "message_stop")) done = true;
        json_decref(o);
        p = end;
    }
    if (!done || !out.p) {
        free(out.p);
        return done ? xstrdup("") : NULL;
    }
    return out.p;
}

static char *answer_text(const kind *k, const resp *r, bool *error_event) {
    *error_event = false;
    if (k->ndjson) return ndjson_text(r->body, error_event);
    if (k->anthropic_sse) return anthropic_sse_text(r->body, error_event);
    if (k->stream) {
        bool done;
        char *t = sse_text(r->body, &done, NULL, NULL, 0);
        *error_event = strstr(r->body, "\"error\"") != NULL;
        if (!done) {
            free(t);
            return NULL;
        }
        return t;
    }
    json_t *o = json_loads(r->body, 0, NULL);
    const char *t = choice_text(o);
    if (!t) /* an Anthropic message: its first content block */
        t = json_string_value(json_object_get(json_array_get(json_object_get(o, "content"), 0), "text"));
    if (!t) /* Ollama: /api/generate, /api/chat */
        t = json_string_value(json_object_get(o, "response"));
    if (!t) t = json_string_value(json_object_get(json_object_get(o, "message"), "content"));
    json_t *item; /* Responses: the message item's output_text */
    size_t i;
    json_array_foreach(json_object_get(o, "output"), i, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        if (!t && type && !strcmp(type, "message"))
            t = json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
    }
    char *s = t ? xstrdup(t) : NULL;
    json_decref(o);
    return s;
}

/* One request; returns 1 when it gave the reference, 0 for a clean error, -1
 * for anything else (printed). */
static int run_one(srv *s, kind *k, long fail_at) {
    resp r;
    if (fail_at >= 0) fa_arm(fail_at);
    int fd = su_send_request(s->port, "POST", k->path, NULL, k->body, strlen(k->body), 60);
    int rc = fd < 0 ? -1 : su_read_response(fd, &r);
    fa_disarm();
    if (rc < 0) {
        fprintf(stderr, "%s, fail_at %ld: no response (crash or hang)\n", k->name, fail_at);
        return -1;
    }
    int out = -1;
    bool err_event;
    char *t = r.status == 200 ? answer_text(k, &r, &err_event) : NULL;
    if (r.status == 200 && t && (!k->ref || !strcmp(t, k->ref)) && !err_event) {
        if (!k->ref) k->ref = xstrdup(t);
        out = 1;
    } else if (r.status == 200 && k->stream && err_event) {
        out = 0; /* a stream cut by an error event (then [DONE], or Ollama's error line) */
    } else if (r.status == 500 || r.status == 503) {
        json_t *o = json_loads(r.body, 0, NULL);
        /* OpenAI and Anthropic {error: {message}}, Ollama {error: "..."} */
        json_t *err = json_object_get(o, "error");
        out = json_is_string(json_object_get(err, "message")) || json_is_string(err) ? 0 : -1;
        json_decref(o);
    }
    if (out < 0)
        fprintf(stderr, "%s, fail_at %ld: status %d, body %.300s\n", k->name, fail_at, r.status, r.body ? r.body : "");
    free(t);
    resp_free(&r);
    return out;
}

int main(void) {
    (void)usage_int;
    (void)choice_finish;
    su_watchdog(900);
    fa = mmap(NULL, sizeof *fa, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(fa != MAP_FAILED);
    if (fa == MAP_FAILED) return test_summary("test_fault_alloc");
    memset(fa, 0, sizeof *fa);
    fa_trace = getenv("KVLOOM_FAULT_TRACE") && *getenv("KVLOOM_FAULT_TRACE") == '1';
    if (fa_trace) { /* backtrace() loads libgcc on first use: not inside a failing allocation */
        void *pc;
        backtrace(&pc, 1);
    }

    srv s;
    const char *flags[] = {"--check", "--kv-mem", "2M", NULL};
    if (srv_start(&s, flags) != 0) {
        CHECK_MSG(0, "server did not start");
        srv_print_log(&s);
        return test_summary("test_fault_alloc");
    }
    atomic_store(&fa->server_pid, s.pid);

    kind kinds[] = {
        {.name = "completion", .path = "/v1/completions", .body =
         "{\"prompt\":\"Once upon a time there was a little girl named Lily.\",\"max_tokens\":8,\"temperature\":0}"},
        {.name = "chat stream", .path = "/v1/chat/completions", .stream = true, .body =
         "{\"messages\":[{\"role\":\"system\",\"content\":\"You tell stories.\"},{\"role\":\"user\",\"content\":"
         "\"Tell me about a cat.\"}],\"max_tokens\":8,\"temperature\":0,\"stream\":true,\"logprobs\":true,"
         "\"top_logprobs\":2,\"stream_options\":{\"include_usage\":true}}"},
        {.name = "json schema", .path = "/v1/chat/completions", .body =
         "{\"messages\":[{\"role\":\"user\",\"content\":\"A dog.\"}],\"max_tokens\":12,\"temperature\":0,"
         "\"stop\":[\"zz\"],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"d\",\"schema\":"
         "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},\"age\":{\"type\":"
         "\"integer\"}},\"required\":[\"name\",\"age\"]}}}}"},
        {.name = "tools", .path = "/v1/chat/completions", .body =
         "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":12,\"temperature\":0,"
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
         "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}],"
         "\"tool_choice\":\"required\"}"},
        {.name = "anthropic", .path = "/v1/messages", .body =
         "{\"model\":\"m\",\"max_tokens\":8,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":"
         "[{\"type\":\"text\",\"text\":\"Hello there.\"}]}]}"},
        {.name = "anthropic stream", .path = "/v1/messages", .stream = true, .anthropic_sse = true, .body =
         "{\"model\":\"m\",\"max_tokens\":8,\"temperature\":0,\"stream\":true,\"system\":\"Be kind.\","
         "\"messages\":[{\"role\":\"user\",\"content\":\"A story.\"}]}"},
        {.name = "responses", .path = "/v1/responses", .body =
         "{\"input\":\"Tell me a story.\",\"instructions\":\"Be brief.\",\"max_output_tokens\":16,"
         "\"temperature\":0}"},
        {.name = "ollama generate", .path = "/api/generate", .body =
         "{\"model\":\"stories260K\",\"prompt\":\"The little bird\",\"stream\":false,"
         "\"options\":{\"temperature\":0,\"num_predict\":8}}"},
        {.name = "ollama chat", .path = "/api/chat", .stream = true, .ndjson = true, .body =
         "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi there.\"}],"
         "\"options\":{\"temperature\":0,\"num_predict\":8}}"},
    };
    /* make test's short form: every second N (every fifth under ASan), the
     * offset rotating per kind; KVLOOM_FAULT_FULL=1 takes every N */
    const char *full = getenv("KVLOOM_FAULT_FULL");
#if defined(__SANITIZE_ADDRESS__)
    long stride = full && *full == '1' ? 1 : 5;
#else
    long stride = full && *full == '1' ? 1 : 2;
#endif
    long total_faults = 0;
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
        kind *k = &kinds[i];
        /* the reference, then the dry run that counts the allocations */
        int r0 = run_one(&s, k, -1);
        CHECK_MSG(r0 == 1, "%s: reference request", k->name);
        run_one(&s, k, 0);
        k->n_alloc = atomic_load(&fa->n_counted);
        k->n_exempt = atomic_load(&fa->n_exempt);
        CHECK_MSG(k->n_alloc > 0, "%s: the dry run counted no allocation", k->name);
        long only = getenv("KVLOOM_FAULT_AT") ? atol(getenv("KVLOOM_FAULT_AT")) : 0;
        for (long n = only ? only : 1 + (long)i % stride; n <= (only ? only : k->n_alloc); n += stride) {
            int r = run_one(&s, k, n);
            long failed = atomic_load(&fa->n_failed);
            total_faults += failed;
            if (r == 1) k->n_ok++;
            else if (r == 0) k->n_err++;
            else k->n_bad++;
            CHECK_MSG(r >= 0, "%s: fail_at %ld of %ld: crash, hang or wrong answer", k->name, n, k->n_alloc);
            if (r < 0 && kill(s.pid, 0) != 0) break;
            int again = run_one(&s, k, -1);
            CHECK_MSG(again == 1, "%s: the request after fail_at %ld differs or fails", k->name, n);
            if (again != 1) break;
        }
        printf("%-12s %4ld failable allocations (+%ld in xmalloc & co, not failed); swept every %ld: "
               "%d reference answers, %d clean errors, %d bad\n",
               k->name, k->n_alloc, k->n_exempt, stride, k->n_ok, k->n_err, k->n_bad);
        free(k->ref);
    }
    printf("faults injected: %ld\n", total_faults);
    CHECK_MSG(wait_idle(s.port, 30), "the engine is idle after the sweep");
    if (test_n_fail) srv_print_log(&s);
    int rc = srv_stop(&s);
    CHECK_MSG(rc == 0, "clean exit (LeakSanitizer under ASan): %d", rc);
    return test_summary("test_fault_alloc");
}
