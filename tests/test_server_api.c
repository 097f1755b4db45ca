/*
 * test_server_api.c — the HTTP API of `kvloom serve` through real sockets:
 * every route, the stories260K greedy reference through /v1/completions,
 * streaming vs non-streaming, stop strings, logprobs, seeds, tokenize
 * round trips, every 4xx (malformed JSON, wrong types, out-of-range values,
 * oversized bodies, unknown routes, API keys, 429) with the server still
 * serving after each, curl for every route, and the official `openai` npm
 * client (tests/node/openai_client.mjs) for chat and completions.
 */
#include "server_util.h"

static int g_port;

/* Expected text of the completion for a case of expected_greedy.json. */
static void check_expected_greedy(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/expected_greedy.json", test_shared_dir());
    json_t *ref = json_load_file(path, 0, NULL);
    CHECK_MSG(ref != NULL, "cannot read %s", path);
    if (!ref) return;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(ref, "cases"), i, c) {
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        const char *text = json_string_value(json_object_get(c, "text"));
        int n_prompt = (int)json_array_size(json_object_get(c, "prompt_ids"));
        int n_out = (int)json_array_size(json_object_get(c, "output_ids"));
        /* output_ids = prompt tokens after BOS, then the generated ones. */
        int max_tokens = n_out - (n_prompt - 1);
        /* The completion is the text after the prompt. */
        size_t pl = strlen(prompt);
        CHECK_MSG(strncmp(text, prompt, pl) == 0, "case %zu: reference text does not start with the prompt", i);
        const char *want = text + pl;
        json_t *body = json_pack("{s:s, s:i, s:f, s:b}", "prompt", prompt, "max_tokens", max_tokens, "temperature", 0.0,
                                 "ignore_eos", 0);
        char *bs = json_dumps(body, 0);
        int st;
        json_t *o = post_json(g_port, "/v1/completions", bs, &st);
        CHECK_EQ_INT(st, 200);
        CHECK_STR(choice_text(o), want);
        CHECK_EQ_INT(usage_int(o, "prompt_tokens"), n_prompt);
        CHECK_EQ_INT(usage_int(o, "completion_tokens"), max_tokens);
        CHECK_STR(choice_finish(o), "length");
        json_decref(o);
        /* The same prompt as token ids gives the same text. */
        json_object_set_new(body, "prompt", json_deep_copy(json_object_get(c, "prompt_ids")));
        free(bs);
        bs = json_dumps(body, 0);
        o = post_json(g_port, "/v1/completions", bs, &st);
        CHECK_EQ_INT(st, 200);
        CHECK_STR(choice_text(o), want);
        json_decref(o);
        free(bs);
        json_decref(body);
        /* /tokenize gives the reference prompt ids. */
        body = json_pack("{s:s}", "content", prompt);
        bs = json_dumps(body, 0);
        o = post_json(g_port, "/tokenize", bs, &st);
        CHECK_EQ_INT(st, 200);
        CHECK_MSG(json_equal(json_object_get(o, "tokens"), json_object_get(c, "prompt_ids")), "tokenize case %zu", i);
        json_decref(o);
        free(bs);
        json_decref(body);
    }
    json_decref(ref);
}

static void check_stream_matches(const char *path, const char *extra) {
    char body[512];
    snprintf(body, sizeof body,
             "{%s\"max_tokens\":40,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             extra);
    resp r;
    CHECK(http_do(g_port, "POST", path, NULL, body, &r) == 0);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.head && strcasestr(r.head, "content-type: text/event-stream"));
    bool done;
    json_t *usage;
    char finish[32];
    char *text = sse_text(r.body ? r.body : "", &done, &usage, finish, sizeof finish);
    CHECK_MSG(done, "stream did not end with [DONE]");
    CHECK_STR(finish, "length");
    CHECK_MSG(usage && json_integer_value(json_object_get(usage, "completion_tokens")) == 40, "usage in stream");
    resp_free(&r);
    snprintf(body, sizeof body, "{%s\"max_tokens\":40,\"temperature\":0}", extra);
    int st;
    json_t *o = post_json(g_port, path, body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(text, choice_text(o));
    CHECK_EQ_INT(usage_int(o, "prompt_tokens"), json_integer_value(json_object_get(usage, "prompt_tokens")));
    json_decref(o);
    json_decref(usage);
    free(text);
}

static void check_stop_strings(void) {
    int st;
    json_t *full = post_json(g_port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0}", &st);
    const char *ft = choice_text(full);
    CHECK(ft && strstr(ft, " girl"));
    if (!ft || !strstr(ft, " girl")) {
        json_decref(full);
        return;
    }
    size_t cut = (size_t)(strstr(ft, " girl") - ft);
    /* Non-streaming: the text stops right before the stop string. */
    json_t *o = post_json(g_port, "/v1/completions",
                          "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,\"stop\":[\"zzz\",\" girl\"]}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK(choice_text(o) && strlen(choice_text(o)) == cut && !strncmp(choice_text(o), ft, cut));
    CHECK_STR(choice_finish(o), "stop");
    json_decref(o);
    /* Streaming: the same, although " girl" arrives as " g" + "irl" or so. */
    resp r;
    http_do(g_port, "POST", "/v1/completions", NULL,
            "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,\"stop\":\" girl\",\"stream\":true}", &r);
    bool done;
    char finish[32];
    char *t = sse_text(r.body ? r.body : "", &done, NULL, finish, sizeof finish);
    CHECK(done);
    CHECK(strlen(t) == cut && !strncmp(t, ft, cut));
    CHECK_STR(finish, "stop");
    free(t);
    resp_free(&r);
    json_decref(full);
}

static void check_logprobs_and_seed(void) {
    int st;
    json_t *o = post_json(g_port, "/v1/completions",
                          "{\"prompt\":\"Lily and Tom\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":3}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *lp = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    CHECK_EQ_INT(json_array_size(json_object_get(lp, "tokens")), 8);
    CHECK_EQ_INT(json_array_size(json_object_get(lp, "token_logprobs")), 8);
    for (size_t i = 0; i < json_array_size(json_object_get(lp, "top_logprobs")); i++) {
        json_t *top = json_array_get(json_object_get(lp, "top_logprobs"), i);
        double chosen = json_number_value(json_array_get(json_object_get(lp, "token_logprobs"), i));
        double best = -1e30;
        const char *k;
        json_t *v;
        json_object_foreach(top, k, v) best = MAX(best, json_number_value(v));
        CHECK(json_object_size(top) >= 1 && json_object_size(top) <= 3);
        CHECK_NEAR(chosen, best, 1e-6); /* greedy picks the most likely token */
        CHECK(chosen <= 0);
    }
    /* The concatenated tokens are the text. */
    char buf[512] = "";
    for (size_t i = 0; i < json_array_size(json_object_get(lp, "tokens")); i++)
        strncat(buf, json_string_value(json_array_get(json_object_get(lp, "tokens"), i)), sizeof buf - strlen(buf) - 1);
    CHECK_STR(buf, choice_text(o));
    json_decref(o);

    /* Chat logprobs shape. */
    o = post_json(g_port, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"temperature\":0,"
                  "\"logprobs\":true,\"top_logprobs\":2}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs"), "content");
    CHECK_EQ_INT(json_array_size(content), 4);
    CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(content, 0), "top_logprobs")), 2);
    json_decref(o);

    /* Tools and a tool-call round trip reach the chat template. */
    const char *conv = "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,"
                       "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                       "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}]";
    char b2[1024];
    snprintf(b2, sizeof b2, "{%s,\"max_tokens\":2}", conv);
    json_t *plain = post_json(g_port, "/v1/chat/completions", b2, &st);
    CHECK_EQ_INT(st, 200);
    snprintf(b2, sizeof b2,
             "{%s,\"max_tokens\":2,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}",
             conv);
    json_t *with = post_json(g_port, "/v1/chat/completions", b2, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(usage_int(with, "prompt_tokens") > usage_int(plain, "prompt_tokens"), "tools did not reach the template");
    json_decref(plain);
    json_decref(with);

    /* A seed makes sampling reproducible; different seeds differ. */
    const char *b1 = "{\"prompt\":\"Once\",\"max_tokens\":24,\"temperature\":1.0,\"seed\":1234}";
    json_t *a = post_json(g_port, "/v1/completions", b1, &st);
    json_t *b = post_json(g_port, "/v1/completions", b1, &st);
    CHECK(choice_text(a) && choice_text(b));
    CHECK_STR(choice_text(a), choice_text(b));
    int n_diff = 0;
    for (int s = 0; s < 4; s++) {
        char bb[200];
        snprintf(bb, sizeof bb, "{\"prompt\":\"Once\",\"max_tokens\":24,\"temperature\":1.0,\"seed\":%d}", 99 + s);
        json_t *c = post_json(g_port, "/v1/completions", bb, &st);
        if (choice_text(c) && choice_text(a) && strcmp(choice_text(c), choice_text(a))) n_diff++;
        json_decref(c);
    }
    CHECK_MSG(n_diff >= 3, "other seeds gave the same text %d/4 times", 4 - n_diff);
    json_decref(a);
    json_decref(b);
}

/* A request that must fail with `status`, naming `param` when given. */
static void expect_error(const char *method, const char *path, const char *headers, const char *body, int status,
                         const char *param) {
    resp r;
    int rc = http_do(g_port, method, path, headers, body, &r);
    CHECK(rc == 0);
    CHECK_MSG(r.status == status, "%s %s %.80s: status %d, want %d (%s)", method, path, body ? body : "", r.status,
              status, r.body ? r.body : "");
    json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
    json_t *err = json_object_get(o, "error");
    CHECK_MSG(json_is_string(json_object_get(err, "message")) && json_is_string(json_object_get(err, "type")),
              "no OpenAI error object: %s", r.body ? r.body : "");
    if (param) CHECK_STR(json_string_value(json_object_get(err, "param")), param);
    json_decref(o);
    resp_free(&r);
    /* The server keeps serving. */
    json_t *h = get_json(g_port, "/health", &rc);
    CHECK_EQ_INT(rc, 200);
    json_decref(h);
}

static void check_errors(void) {
    const char *C = "/v1/completions", *H = "/v1/chat/completions";
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", ", 400, NULL);
    expect_error("POST", C, NULL, "not json at all", 400, NULL);
    expect_error("POST", C, NULL, "[1,2,3]", 400, NULL);
    expect_error("POST", C, NULL, "", 400, NULL);
    expect_error("POST", C, NULL, "{\"max_tokens\": 5}", 400, "prompt");
    expect_error("POST", C, NULL, "{\"prompt\": 12}", 400, "prompt");
    expect_error("POST", C, NULL, "{\"prompt\": []}", 400, "prompt");
    expect_error("POST", C, NULL,
                 "{\"prompt\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\","
                 "\"14\",\"15\",\"16\",\"17\"]}",
                 400, "prompt");
    expect_error("POST", C, NULL, "{\"prompt\": [\"a\", [1, 2]]}", 400, "prompt");
    expect_error("POST", C, NULL, "{\"prompt\": [1, 99999]}", 400, "prompt");
    expect_error("POST", C, NULL, "{\"prompt\": [1, -3]}", 400, "prompt");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"temperature\": \"hot\"}", 400, "temperature");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"temperature\": 7}", 400, "temperature");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"top_p\": 0}", 400, "top_p");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"top_p\": 1.5}", 400, "top_p");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"top_k\": 2.5}", 400, "top_k");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"min_p\": -1}", 400, "min_p");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"max_tokens\": 0}", 400, "max_tokens");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"max_tokens\": \"10\"}", 400, "max_tokens");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"presence_penalty\": 3}", 400, "presence_penalty");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"frequency_penalty\": -2.5}", 400, "frequency_penalty");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"seed\": \"x\"}", 400, "seed");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"stop\": 5}", 400, "stop");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"stop\": [\"a\", 1]}", 400, "stop");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"stream\": \"yes\"}", 400, "stream");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"stream_options\": 1}", 400, "stream_options");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"logprobs\": 50}", 400, "logprobs");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"n\": 17}", 400, "n");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"ignore_eos\": 1}", 400, "ignore_eos");
    expect_error("POST", C, NULL, "{\"prompt\": \"hi\", \"model\": 3}", 400, "model");
    expect_error("POST", H, NULL, "{\"prompt\": \"hi\"}", 400, "messages");
    expect_error("POST", H, NULL, "{\"messages\": []}", 400, "messages");
    expect_error("POST", H, NULL, "{\"messages\": [{\"content\": \"x\"}]}", 400, "messages");
    expect_error("POST", H, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages");
    expect_error("POST", H, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 400,
                 "top_logprobs");
    expect_error("POST", H, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 1}", 400,
                 "logprobs");
    expect_error("POST", H, NULL, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400, "messages");
    expect_error("POST", H, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": 3}", 400,
                 "tools");
    expect_error("POST", H, NULL,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": [1]}", 400,
                 "chat_template_kwargs");
    expect_error("POST", "/tokenize", NULL, "{\"content\": 1}", 400, "content");
    expect_error("POST", "/detokenize", NULL, "{\"tokens\": [1, 100000]}", 400, "tokens");
    expect_error("POST", "/detokenize", NULL, "{\"tokens\": \"x\"}", 400, "tokens");
    /* A prompt longer than the context (2048 for this model). */
    size_t big_n = 30000;
    char *big = xmalloc(big_n + 64);
    strcpy(big, "{\"prompt\": \"");
    for (size_t i = strlen(big); i < big_n; i += 4) memcpy(big + i, "cat ", 4);
    strcpy(big + big_n, "\"}");
    expect_error("POST", C, NULL, big, 400, "prompt");
    free(big);
    /* Routes and methods. */
    expect_error("GET", "/v1/nothing", NULL, NULL, 404, NULL);
    expect_error("POST", "/", NULL, "{}", 404, NULL);
    expect_error("GET", C, NULL, NULL, 405, NULL);
    expect_error("DELETE", "/v1/models", NULL, NULL, 405, NULL);
    /* An oversized body: 413, both with Content-Length and when streamed. */
    size_t n = (size_t)9 << 20;
    char *huge = xmalloc(n + 1);
    memset(huge, ' ', n);
    huge[0] = '{';
    huge[n - 1] = '}';
    huge[n] = 0;
    expect_error("POST", C, NULL, huge, 413, NULL);
    free(huge);
}

/* Bytes that are not HTTP at all, a header block larger than any buffer, a
 * client that sends half a body and vanishes: MHD answers or closes, and the
 * server keeps serving. */
static void check_raw_http(void) {
    const char *junk[] = {"GARBAGE\r\n\r\n", "GET /health HTTP/9.9\r\n\r\n", "\x01\x02\x03\x04\r\n\r\n",
                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":"};
    for (size_t i = 0; i < ARRAY_LEN(junk); i++) {
        int fd = su_connect(g_port, 5);
        CHECK(fd >= 0);
        if (fd < 0) continue;
        su_send_all(fd, junk[i], strlen(junk[i]));
        shutdown(fd, SHUT_WR);
        char buf[512];
        while (recv(fd, buf, sizeof buf, 0) > 0) {
        }
        close(fd);
    }
    int fd = su_connect(g_port, 5);
    if (fd >= 0) {
        size_t n = 200000;
        char *h = xmalloc(n + 64);
        strcpy(h, "GET /health HTTP/1.1\r\nX-Big: ");
        size_t k = strlen(h);
        memset(h + k, 'a', n);
        strcpy(h + k + n, "\r\n\r\n");
        su_send_all(fd, h, strlen(h));
        char buf[512];
        ssize_t got = recv(fd, buf, sizeof buf - 1, 0);
        if (got > 0) {
            buf[got] = 0;
            CHECK_MSG(strstr(buf, " 200 ") == NULL, "a 200 KB header was accepted");
        }
        free(h);
        close(fd);
    }
    int st;
    json_t *o = get_json(g_port, "/health", &st);
    CHECK_EQ_INT(st, 200);
    json_decref(o);
}

static void check_routes(void) {
    int st;
    json_t *o = get_json(g_port, "/health", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(o, "status")), "ok");
    json_decref(o);
    o = get_json(g_port, "/v1/models", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(o, "object")), "list");
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 0), "id")), "stories260K");
    json_decref(o);
    o = get_json(g_port, "/v1/models/stories260K", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(o, "id")), "stories260K");
    json_decref(o);
    o = get_json(g_port, "/v1/models/gpt-4", &st);
    CHECK_EQ_INT(st, 404);
    json_decref(o);
    /* tokenize -> detokenize round trip, with pieces. */
    o = post_json(g_port, "/tokenize", "{\"content\":\"Hello world, héllo\",\"with_pieces\":true}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *toks = json_object_get(o, "tokens");
    CHECK(json_array_size(toks) > 3);
    CHECK(json_is_string(json_object_get(json_array_get(toks, 1), "piece")));
    json_t *ids = json_array();
    for (size_t i = 0; i < json_array_size(toks); i++)
        json_array_append(ids, json_object_get(json_array_get(toks, i), "id"));
    json_t *req = json_pack("{s:o}", "tokens", ids);
    char *s = json_dumps(req, 0);
    json_t *d = post_json(g_port, "/detokenize", s, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_STR(json_string_value(json_object_get(d, "content")), "Hello world, héllo");
    free(s);
    json_decref(req);
    json_decref(d);
    json_decref(o);
}

static void check_metrics(void) {
    /* Metrics: Prometheus text with every family. */
    resp r;
    http_do(g_port, "GET", "/metrics", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    const char *names[] = {"kvloom_requests_running ", "kvloom_requests_waiting ", "kvloom_prompt_tokens_total ",
                           "kvloom_generation_tokens_total ", "kvloom_prompt_tokens_cached_total ",
                           "kvloom_kv_blocks_used ", "kvloom_kv_blocks_total ", "kvloom_kv_blocks_cached ",
                           "kvloom_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
                           "kvloom_time_per_output_token_seconds_count ", "kvloom_requests_total{status=\"200\"}",
                           "kvloom_requests_total{status=\"400\"}", "# TYPE kvloom_time_to_first_token_seconds histogram"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) CHECK_MSG(r.body && strstr(r.body, names[i]), "metrics: %s", names[i]);
    resp_free(&r);
    CHECK(metric(g_port, "kvloom_generation_tokens_total") > 100);
    CHECK(metric(g_port, "kvloom_kv_blocks_total") > 100);
    /* the gateway names (vLLM's) agree with kvloom's own */
    CHECK(metric(g_port, "vllm:prefix_cache_queries_total") == metric(g_port, "kvloom_prompt_tokens_total"));
    CHECK(metric(g_port, "vllm:prefix_cache_hits_total") == metric(g_port, "kvloom_prompt_tokens_cached_total"));
    CHECK(metric(g_port, "vllm:num_requests_running") == 0 && metric(g_port, "vllm:num_requests_waiting") == 0);
    double use = metric(g_port, "vllm:kv_cache_usage_perc");
    CHECK_MSG(use >= 0 && use <= 1, "kv_cache_usage_perc %g", use);
    http_do(g_port, "GET", "/metrics", NULL, NULL, &r);
    CHECK(r.body && strstr(r.body, "vllm:cache_config_info{block_size=\"16\","));
    resp_free(&r);
    /* GET /load: the balancer's poll (JSON) */
    http_do(g_port, "GET", "/load", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    json_t *ld = r.body ? json_loads(r.body, 0, NULL) : NULL;
    CHECK(ld && json_is_integer(json_object_get(ld, "running")) && json_is_integer(json_object_get(ld, "waiting")) &&
          json_is_number(json_object_get(ld, "kv_usage")) && json_real_value(json_object_get(ld, "ttft_recent_s")) > 0);
    json_decref(ld);
    resp_free(&r);
    /* the latency histograms count each finished generation once: TTFT
     * every one with a token, TPOT those with more than one; a whole
     * answer's observations are in place when it is answered */
    double t0 = metric(g_port, "kvloom_time_to_first_token_seconds_count");
    double p0 = metric(g_port, "kvloom_time_per_output_token_seconds_count");
    double sum0 = metric(g_port, "kvloom_time_to_first_token_seconds_sum");
    int st;
    for (int i = 0; i < 3; i++)
        json_decref(post_json(g_port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":5,\"ignore_eos\":true}", &st));
    json_decref(post_json(g_port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":1}", &st));
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(metric(g_port, "kvloom_time_to_first_token_seconds_count") == t0 + 4, "TTFT count %g -> %g", t0,
              metric(g_port, "kvloom_time_to_first_token_seconds_count"));
    CHECK_MSG(metric(g_port, "kvloom_time_per_output_token_seconds_count") == p0 + 3, "TPOT count %g -> %g", p0,
              metric(g_port, "kvloom_time_per_output_token_seconds_count"));
    CHECK(metric(g_port, "kvloom_time_to_first_token_seconds_sum") > sum0);
}

/* curl, a real client, against every route. */
static void check_curl(void) {
    if (system("curl --version > /dev/null 2>&1") != 0) {
        CHECK_MSG(0, "curl is not installed");
        return;
    }
    struct {
        const char *args;
        const char *want_status;
        const char *want_text;
    } cases[] = {
        {"/health", "200", "\"ok\""},
        {"/v1/models", "200", "stories260K"},
        {"/metrics", "200", "kvloom_kv_blocks_total"},
        {"-X POST -H 'Content-Type: application/json' -d '{\"content\":\"Once upon\"}' URL/tokenize", "200", "\"tokens\""},
        {"-X POST -d '{\"tokens\":[1,403,407]}' URL/detokenize", "200", "Once upon"},
        {"-d '{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0}' URL/v1/completions", "200",
         ", there was a little girl"},
        {"-N -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"stream\":true}' URL/v1/completions",
         "200", "data: [DONE]"},
        {"-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4}' URL/v1/chat/completions", "200",
         "chat.completion"},
        {"-N -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"stream\":true}' "
         "URL/v1/chat/completions",
         "200", "chat.completion.chunk"},
        {"-d '{bad' URL/v1/completions", "400", "invalid_request_error"},
        {"/nope", "404", "not_found_error"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", g_port);
        char args[1024];
        const char *a = cases[i].args;
        if (a[0] == '/')
            snprintf(args, sizeof args, "%s%s", url, a);
        else {
            const char *u = strstr(a, "URL");
            snprintf(args, sizeof args, "%.*s%s%s", (int)(u - a), a, url, u + 3);
        }
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "curl -s -m 30 -w '\\n%%{http_code}' %s 2>&1", args);
        FILE *f = popen(cmd, "r");
        char out[65536];
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        out[n] = 0;
        if (f) pclose(f);
        char *last = strrchr(out, '\n');
        CHECK_MSG(last && !strcmp(last + 1, cases[i].want_status), "curl %s: status %s", args, last ? last + 1 : "?");
        CHECK_MSG(strstr(out, cases[i].want_text), "curl %s: no '%s' in %.200s", args, cases[i].want_text, out);
    }
}

/* A script of the official openai npm client (tests/node/NAME.mjs, which
 * ends with "NAME: N passed, N failed"). */
static void check_openai_node(const srv *s, const char *key, const char *name) {
    if (access("tests/node_modules/openai/package.json", R_OK) != 0) {
        CHECK_MSG(0, "tests/node_modules/openai is missing: run tools/setup.sh (npm install in tests/)");
        return;
    }
    char cmd[512], tag[64];
    snprintf(cmd, sizeof cmd, "timeout 90 node tests/node/%s.mjs http://127.0.0.1:%d/v1 %s 2>&1", name, s->port, key);
    snprintf(tag, sizeof tag, "%s: ", name);
    FILE *f = popen(cmd, "r");
    char out[16384];
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    int st = f ? pclose(f) : -1;
    int p = 0, fl = -1;
    const char *line = strstr(out, tag);
    if (line) sscanf(line + strlen(tag), "%d passed, %d failed", &p, &fl);
    CHECK_MSG(st == 0 && fl == 0 && p >= 8, "node %s: exit %d, %d passed, %d failed:\n%s", name, st, p, fl, out);
}

static void check_auth_and_queue(void) {
    const char *flags[] = {"--api-key",       "sekrit-key", "--max-queue", "1",   "--max-running", "1",
                           "--step-delay-us", "40000",      "--max-body",  "64K", NULL};
    srv s;
    CHECK(srv_start(&s, flags) == 0);
    if (!s.port) return;
    int saved = g_port;
    g_port = s.port;
    /* /health is open; everything else needs the key. */
    resp r;
    http_do(s.port, "GET", "/health", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    http_do(s.port, "GET", "/load", NULL, NULL, &r); /* so is the balancer's poll */
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    expect_error("GET", "/v1/models", NULL, NULL, 401, NULL);
    expect_error("GET", "/metrics", "Authorization: Bearer wrong\r\n", NULL, 401, NULL);
    expect_error("POST", "/v1/completions", "Authorization: Basic c2Vrcml0LWtleQ==\r\n", "{\"prompt\":\"x\"}", 401, NULL);
    expect_error("POST", "/v1/completions", "Authorization: Bearer sekrit-ke\r\n", "{\"prompt\":\"x\"}", 401, NULL);
    http_do(s.port, "GET", "/v1/models", "Authorization: Bearer sekrit-key\r\n", NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);

    /* --max-body 64K: a 100 KB body gets 413; a chunked upload that goes on
     * far past the limit is cut off; the server keeps serving. */
    {
        size_t n = 100000;
        char *b = xmalloc(n + 1);
        memset(b, ' ', n);
        b[0] = '{';
        b[n - 1] = '}';
        b[n] = 0;
        http_do(s.port, "POST", "/v1/completions", "Authorization: Bearer sekrit-key\r\n", b, &r);
        CHECK_EQ_INT(r.status, 413);
        resp_free(&r);
        free(b);
        int fd = su_connect(s.port, 10);
        const char *h = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        su_send_all(fd, h, strlen(h));
        char chunk[8192 + 16];
        int k = snprintf(chunk, sizeof chunk, "2000\r\n");
        memset(chunk + k, 'x', 8192);
        memcpy(chunk + k + 8192, "\r\n", 2);
        int sent = 0;
        for (int i = 0; i < 2000; i++, sent++) /* 16 MB, 250x the limit */
            if (su_send_all(fd, chunk, (size_t)k + 8194) < 0) break;
        CHECK_MSG(sent < 2000, "a chunked body 250x over the limit was read to the end");
        close(fd);
        json_t *hh = get_json(s.port, "/health", &k);
        CHECK_EQ_INT(k, 200);
        json_decref(hh);
    }

    /* 429: one running (max-running 1), one waiting (max-queue 1), the next refused.
     * stories260K's context is 512 positions, so the first request ends after
     * ~510 of its 2000 tokens (finish "length"): with --step-delay-us 40000 that
     * takes >= 20 s, so it is still running when the probe goes out. (At 10000
     * it took ~5 s, and under ASan or TSan the second request sometimes came
     * after the first had ended: 0 waiting, 1 running, and a 200 probe.) */
    const char *auth = "Authorization: Bearer sekrit-key\r\n";
    su_metrics_headers = auth;
    const char *longreq = "{\"prompt\":\"Once\",\"max_tokens\":2000,\"ignore_eos\":true,\"stream\":true}";
    int fd1 = su_send_request(s.port, "POST", "/v1/completions", auth, longreq, strlen(longreq), 30);
    /* Read until the first token event: then it is running (the headers
     * alone come before admission). */
    char buf[8192];
    size_t got = 0;
    double tr = su_now();
    while (fd1 >= 0 && got < sizeof buf - 1 && su_now() - tr < 20) {
        ssize_t k = recv(fd1, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
        buf[got] = 0;
        if (strstr(buf, "data: ")) break;
    }
    CHECK(got > 0 && strstr(buf, "data: "));
    int fd2 = su_send_request(s.port, "POST", "/v1/completions", auth, longreq, strlen(longreq), 30);
    CHECK(fd2 >= 0);
    double t0 = su_now();
    while ((metric(s.port, "kvloom_requests_waiting") != 1 || metric(s.port, "kvloom_requests_running") != 1) &&
           su_now() - t0 < 20)
        usleep(5000);
    double n_wait = metric(s.port, "kvloom_requests_waiting"), n_run = metric(s.port, "kvloom_requests_running");
    CHECK_MSG(n_wait == 1 && n_run == 1, "before the probe: %g waiting, %g running (want 1 and 1)", n_wait, n_run);
    http_do(s.port, "POST", "/v1/completions", auth, "{\"prompt\":\"Once\",\"max_tokens\":2}", &r);
    CHECK_MSG(r.status == 429, "the probe: %d with %g waiting, %g running before it", r.status, n_wait, n_run);
    CHECK(r.head && strcasestr(r.head, "Retry-After:"));
    CHECK(r.body && strstr(r.body, "rate_limit_error"));
    resp_free(&r);
    if (fd1 >= 0) close(fd1);
    if (fd2 >= 0) close(fd2);
    /* Once they are cancelled, requests are accepted again. */
    CHECK(wait_idle(s.port, 20));
    http_do(s.port, "POST", "/v1/completions", auth, "{\"prompt\":\"Once\",\"max_tokens\":2}", &r);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    /* The openai client with the key. */
    check_openai_node(&s, "sekrit-key", "openai_client");
    su_metrics_headers = NULL;
    g_port = saved;
    CHECK_EQ_INT(srv_stop(&s), 0);
}

int main(void) {
    su_watchdog(240);
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "32M", NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server did not start");
    if (rc != 0) {
        srv_print_log(&s);
        return test_summary("test_server_api");
    }
    g_port = s.port;
    check_routes();
    check_expected_greedy();
    check_stream_matches("/v1/completions", "\"prompt\":\"The cat sat on the mat.\",");
    check_stream_matches("/v1/chat/completions",
                         "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Tell a story\"}],");
    check_stop_strings();
    check_logprobs_and_seed();
    check_errors();
    check_raw_http();
    check_curl();
    check_metrics();
    check_openai_node(&s, "none", "openai_params");
    check_auth_and_queue();
    /* Still healthy after everything; a clean shutdown. */
    CHECK(wait_idle(s.port, 10));
    CHECK_EQ_INT(srv_stop(&s), 0);
    return test_summary("test_server_api");
}
