/*
 * test_server_engine.c — the engine behind `kvloom serve`, observed through
 * real HTTP clients on 127.0.0.1:
 *   - N concurrent clients at temperature 0 get exactly what each gets alone
 *     (and what they got before their prefix was cached);
 *   - a repeated long prefix is served from the cache (usage cached_tokens,
 *     /metrics) and an extension prefills only its new part;
 *   - a request whose prefix another request is still prefilling joins it
 *     instead of recomputing it;
 *   - a client that disconnects mid-prefill or mid-decode is cancelled and its
 *     blocks are freed (metrics back to baseline);
 *   - a tiny KV pool with many long concurrent requests: preemption, all
 *     finish with the right output, nothing crashes (--check verifies the
 *     pool and the prefix tree after every engine step).
 */
#include <pthread.h>

#include "server_util.h"

static const char *words[] = {"the", "cat", "dog", "sun", "tree", "happy", "little", "girl", "boy", "ball",
                              "park", "big", "red", "blue", "played", "saw", "went", "home", "mom", "friend",
                              "toy", "box", "bird", "sky", "fun", "day", "ran", "jumped", "smiled", "good"};

/* A deterministic text of n words, different for each seed. */
static char *make_text(int seed, int n_words, const char *prefix) {
    size_t cap = strlen(prefix) + (size_t)n_words * 8 + 16;
    char *s = xmalloc(cap);
    strcpy(s, prefix);
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n_words; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        strcat(s, i ? " " : "");
        strcat(s, words[x % ARRAY_LEN(words)]);
    }
    strcat(s, ".");
    return s;
}

static char *completion_body(const char *prompt, int max_tokens, bool stream) {
    json_t *b = json_pack("{s:s, s:i, s:f, s:b, s:b, s:{s:b}}", "prompt", prompt, "max_tokens", max_tokens,
                          "temperature", 0.0, "ignore_eos", 1, "stream", stream, "stream_options", "include_usage", 1);
    char *s = json_dumps(b, 0);
    json_decref(b);
    return s;
}

typedef struct job {
    int port;
    const char *prompt;
    int max_tokens;
    bool stream;
    int status;
    char *text;
    long cached;
    char finish[32];
} job;

static void run_job(job *j) {
    char *body = completion_body(j->prompt, j->max_tokens, j->stream);
    resp r;
    j->status = -1;
    if (http_do(j->port, "POST", "/v1/completions", NULL, body, &r) == 0) {
        j->status = r.status;
        if (j->stream) {
            bool done;
            json_t *usage = NULL;
            j->text = sse_text(r.body, &done, &usage, j->finish, sizeof j->finish);
            j->cached = usage ? (long)json_integer_value(json_object_get(json_object_get(usage, "prompt_tokens_details"),
                                                                           "cached_tokens"))
                              : -1;
            if (!done) j->status = -2;
            json_decref(usage);
        } else {
            json_t *o = json_loads(r.body, 0, NULL);
            j->text = choice_text(o) ? xstrdup(choice_text(o)) : NULL;
            j->cached = usage_int(o, "cached_tokens");
            if (choice_finish(o)) snprintf(j->finish, sizeof j->finish, "%s", choice_finish(o));
            json_decref(o);
        }
        resp_free(&r);
    }
    free(body);
}

static void *job_thread(void *arg) {
    run_job(arg);
    return NULL;
}

static void run_concurrently(job *jobs, int n) {
    pthread_t th[32];
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, job_thread, &jobs[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static int n_tokens(int port, const char *text) {
    json_t *b = json_pack("{s:s}", "content", text);
    char *s = json_dumps(b, 0);
    int st;
    json_t *o = post_json(port, "/tokenize", s, &st);
    int n = (int)json_array_size(json_object_get(o, "tokens"));
    json_decref(o);
    json_decref(b);
    free(s);
    return n;
}

enum { N_CONC = 6 };

/* Texts of N_CONC prompts computed alone on the main server (references for
 * the concurrency and pool-exhaustion checks). */
static char *g_prompts[N_CONC];
static char *g_alone[N_CONC];

static void check_concurrency(int port) {
    for (int i = 0; i < N_CONC; i++) {
        g_prompts[i] = make_text(100 + i, 30 + 7 * i, "Once upon a time ");
        job j = {.port = port, .prompt = g_prompts[i], .max_tokens = 60, .stream = false};
        run_job(&j);
        CHECK_EQ_INT(j.status, 200);
        CHECK(j.text && strlen(j.text) > 20);
        g_alone[i] = j.text;
    }
    /* All at once, twice (the second round hits the prefix cache), half of
     * them streaming. */
    for (int round = 0; round < 2; round++) {
        job jobs[N_CONC];
        for (int i = 0; i < N_CONC; i++)
            jobs[i] = (job){.port = port, .prompt = g_prompts[i], .max_tokens = 60, .stream = (i + round) % 2 == 1};
        run_concurrently(jobs, N_CONC);
        for (int i = 0; i < N_CONC; i++) {
            CHECK_EQ_INT(jobs[i].status, 200);
            CHECK_MSG(jobs[i].text && g_alone[i] && !strcmp(jobs[i].text, g_alone[i]),
                      "round %d client %d: concurrent output differs from alone:\n  %s\n  %s", round, i,
                      jobs[i].text ? jobs[i].text : "(null)", g_alone[i] ? g_alone[i] : "(null)");
            if (round == 1) CHECK_MSG(jobs[i].cached > 0, "round 1 client %d: cached %ld", i, jobs[i].cached);
            free(jobs[i].text);
        }
    }
    CHECK(wait_idle(port, 20));
}

static void check_prefix_cache(int port) {
    char *P = make_text(7, 260, "In a quiet town far away, ");
    char *ext = xmalloc(strlen(P) + 64);
    sprintf(ext, "%s Then the girl went home.", P);
    int nP = n_tokens(port, P), nE = n_tokens(port, ext);
    CHECK(nP > 200 && nE > nP);
    double c0 = metric(port, "kvloom_prompt_tokens_computed_total");
    double k0 = metric(port, "kvloom_prompt_tokens_cached_total");
    double r0 = metric(port, "kvloom_kv_partial_tokens_total");
    job a = {.port = port, .prompt = P, .max_tokens = 8};
    run_job(&a);
    CHECK_EQ_INT(a.status, 200);
    /* new text: at most the first rows of a block (the BOS token and the
     * words earlier prompts began with), copied from an earlier block */
    CHECK_MSG(a.cached >= 0 && a.cached < 16, "a new prompt: %ld cached", a.cached);
    double c1 = metric(port, "kvloom_prompt_tokens_computed_total");
    CHECK_EQ_INT((long)(c1 - c0), nP - a.cached);
    /* The same prompt again: all but the last token (whose logits are
     * needed) come from the cache — the full blocks shared, the rest of the
     * block holding the last token copied from the first run's block
     * (complete in the tree or pinned partial: "A partial last block") —
     * and the output is the same. */
    double r1 = metric(port, "kvloom_kv_partial_tokens_total");
    job b = {.port = port, .prompt = P, .max_tokens = 8};
    run_job(&b);
    CHECK_EQ_INT(b.status, 200);
    CHECK_EQ_INT(b.cached, nP - 1);
    CHECK_EQ_INT((long)(metric(port, "kvloom_kv_partial_tokens_total") - r1), (nP - 1) % 16);
    CHECK_EQ_INT((long)(r1 - r0), a.cached);
    CHECK(a.text && b.text && !strcmp(a.text, b.text));
    double c2 = metric(port, "kvloom_prompt_tokens_computed_total");
    CHECK_EQ_INT((long)(c2 - c1), nP - b.cached);
    CHECK_EQ_INT((long)(metric(port, "kvloom_prompt_tokens_cached_total") - k0), a.cached + b.cached);
    CHECK(metric(port, "kvloom_kv_blocks_cached") >= nP / 16);
    /* An extension prefills only its new part. */
    job c = {.port = port, .prompt = ext, .max_tokens = 8, .stream = true};
    run_job(&c);
    CHECK_EQ_INT(c.status, 200);
    CHECK_MSG(c.cached >= nP - 1, "extension: cached %ld of %d", c.cached, nP);
    double c3 = metric(port, "kvloom_prompt_tokens_computed_total");
    CHECK_EQ_INT((long)(c3 - c2), nE - c.cached);
    /* And its output equals what a cold run would give: ask with the cache
     * cold for the whole prompt by sending it as a new request on a server
     * that has never seen it is done in check_pool_exhaustion; here compare
     * with a second, fully cached run. */
    job d = {.port = port, .prompt = ext, .max_tokens = 8};
    run_job(&d);
    CHECK(c.text && d.text && !strcmp(c.text, d.text));
    free(a.text);
    free(b.text);
    free(c.text);
    free(d.text);
    free(P);
    free(ext);
    CHECK(wait_idle(port, 20));
}

/* Server with a slowed engine: joining a pending prefix, disconnects. */
static void check_slow_engine(void) {
    const char *flags[] = {"--check", "--kv-mem", "32M", "--step-delay-us", "5000", "--max-batch-tokens", "16", NULL};
    srv s;
    CHECK(srv_start(&s, flags) == 0);
    if (!s.port) return;
    int port = s.port;

    /* Two requests with the same long prompt at once: the second waits for
     * the blocks the first is computing instead of recomputing them. */
    char *P = make_text(21, 240, "A long time ago, ");
    int nP = n_tokens(port, P);
    double c0 = metric(port, "kvloom_prompt_tokens_computed_total");
    job jobs[2] = {{.port = port, .prompt = P, .max_tokens = 4, .stream = true},
                   {.port = port, .prompt = P, .max_tokens = 4, .stream = false}};
    pthread_t t0;
    pthread_create(&t0, NULL, job_thread, &jobs[0]);
    usleep(15000); /* the first is prefilling (about 35 steps of 5 ms) */
    run_job(&jobs[1]);
    pthread_join(t0, NULL);
    CHECK_EQ_INT(jobs[0].status, 200);
    CHECK_EQ_INT(jobs[1].status, 200);
    /* the whole blocks, and of the last one the rows the first had computed
     * when the second was admitted (copied from the block it is writing) */
    long both = jobs[0].cached + jobs[1].cached;
    CHECK_MSG(both >= (nP - 1) / 16 * 16 && both <= nP - 1, "cached %ld + %ld of %d", jobs[0].cached,
              jobs[1].cached, nP);
    CHECK(jobs[0].text && jobs[1].text && !strcmp(jobs[0].text, jobs[1].text));
    double c1 = metric(port, "kvloom_prompt_tokens_computed_total");
    CHECK_MSG((long)(c1 - c0) == 2 * nP - both, "computed %ld prompt tokens for 2 x %d", (long)(c1 - c0), nP);
    free(jobs[0].text);
    free(jobs[1].text);
    CHECK(wait_idle(port, 20));

    /* Disconnect mid-decode: read the first chunk of a long stream, close. */
    double g0 = metric(port, "kvloom_generation_tokens_total");
    double e0 = metric(port, "kvloom_requests_total{status=\"499\"}");
    char *body = completion_body("Once upon a time", 1500, true);
    int fd = su_send_request(port, "POST", "/v1/completions", NULL, body, strlen(body), 30);
    CHECK(su_read_until(fd, "data: ", 20)); /* a token: it is decoding */
    usleep(30000);
    if (fd >= 0) close(fd);
    free(body);
    CHECK(wait_idle(port, 20));
    double g1 = metric(port, "kvloom_generation_tokens_total");
    CHECK_MSG(g1 - g0 >= 1 && g1 - g0 < 500, "generated %.0f tokens after disconnect", g1 - g0);
    CHECK_EQ_INT((long)(metric(port, "kvloom_requests_total{status=\"499\"}") - (e0 < 0 ? 0 : e0)), 1);

    /* Disconnect mid-prefill (non-streaming): a ~1400-token prompt takes ~90
     * steps of 16 tokens (5 ms each); the client leaves after the first. */
    char *L = make_text(33, 600, "Far away, ");
    int nL = n_tokens(port, L);
    CHECK(nL > 1000 && nL < 2000);
    double p0 = metric(port, "kvloom_prompt_tokens_computed_total");
    g0 = metric(port, "kvloom_generation_tokens_total");
    body = completion_body(L, 10, false);
    fd = su_send_request(port, "POST", "/v1/completions", NULL, body, strlen(body), 30);
    CHECK(fd >= 0);
    /* Leave once the prefill has started (the engine computed some of it). */
    double tw = su_now();
    while (metric(port, "kvloom_prompt_tokens_computed_total") == p0 && su_now() - tw < 20) usleep(2000);
    if (fd >= 0) close(fd);
    CHECK(wait_idle(port, 20));
    double p1 = metric(port, "kvloom_prompt_tokens_computed_total");
    CHECK_MSG(p1 - p0 > 0 && p1 - p0 < nL, "prefill computed %.0f of %d tokens before the cancel", p1 - p0, nL);
    CHECK_EQ_INT((long)(metric(port, "kvloom_generation_tokens_total") - g0), 0);
    /* The same prompt afterwards runs normally and reuses only READY blocks. */
    job j = {.port = port, .prompt = L, .max_tokens = 4};
    run_job(&j);
    CHECK_EQ_INT(j.status, 200);
    CHECK(j.cached >= 0 && j.cached <= p1 - p0);
    free(j.text);
    free(body);
    free(L);
    free(P);
    CHECK(wait_idle(port, 20));
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* A pool of 40 blocks (640 tokens) and 8 requests needing ~10 blocks each. */
static void check_pool_exhaustion(void) {
    const char *flags[] = {"--check", "--kv-mem", "400K", "--max-batch-tokens", "64", NULL};
    srv s;
    CHECK(srv_start(&s, flags) == 0);
    if (!s.port) return;
    int port = s.port;
    double total = metric(port, "kvloom_kv_blocks_total");
    CHECK_MSG(total >= 30 && total <= 50, "kv blocks %.0f", total);
    job jobs[2 * N_CONC];
    for (int i = 0; i < 2 * N_CONC; i++)
        jobs[i] = (job){.port = port, .prompt = g_prompts[i % N_CONC], .max_tokens = 60, .stream = i % 3 == 0};
    run_concurrently(jobs, 2 * N_CONC);
    for (int i = 0; i < 2 * N_CONC; i++) {
        CHECK_EQ_INT(jobs[i].status, 200);
        CHECK_MSG(jobs[i].text && g_alone[i % N_CONC] && !strcmp(jobs[i].text, g_alone[i % N_CONC]),
                  "client %d under pool pressure: output differs", i);
        CHECK_STR(jobs[i].finish, "length");
        free(jobs[i].text);
    }
    CHECK_MSG(metric(port, "kvloom_preemptions_total") > 0, "no preemption happened; the test is too easy");
    CHECK(wait_idle(port, 20));
    /* A prompt the pool can never hold is refused with 400, not hung. */
    char *huge = make_text(5, 900, "");
    char *body = completion_body(huge, 4, false);
    int st;
    json_t *o = post_json(port, "/v1/completions", body, &st);
    CHECK_EQ_INT(st, 400);
    json_decref(o);
    free(body);
    free(huge);
    /* One that fits but whose generation outgrows the pool ends "length". */
    char *mid = make_text(6, 200, "");
    job j = {.port = port, .prompt = mid, .max_tokens = 1000};
    run_job(&j);
    CHECK_EQ_INT(j.status, 200);
    CHECK_STR(j.finish, "length");
    free(j.text);
    free(mid);
    CHECK(wait_idle(port, 20));
    CHECK_EQ_INT(srv_stop(&s), 0);
}

int main(void) {
    su_watchdog(240);
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc != 0) return test_summary("test_server_engine");
    check_concurrency(s.port);
    check_prefix_cache(s.port);
    CHECK_EQ_INT(srv_stop(&s), 0);
    check_slow_engine();
    check_pool_exhaustion();
    for (int i = 0; i < N_CONC; i++) {
        free(g_prompts[i]);
        free(g_alone[i]);
    }
    return test_summary("test_server_engine");
}
