/*
 * test_server_kvpolicy.c — the agent KV policy end to end (`kvloom serve`
 * over real sockets, stories260K, a small pool): an agent whose turn ended
 * resumes after other agents have filled the pool several times over, and
 * its prompt comes from its pinned blocks (cached_tokens), while the same
 * sequence on `--kv-policy lru` recomputes it (so the assertion can fail);
 * the fill itself runs with every block pinned (pins yield, every request
 * answers 200, nothing deadlocks); kv_hint "done" releases a session's pin;
 * bad kv_ttl / kv_hint / prompt_cache_key values are 400s naming the field;
 * with --kv-disk, a context whose agent announced its return (kv_hint
 * next_use_s) is read back from disk before it and found in RAM.
 * Everything is checked with --check (pool and tree consistency, pin
 * references counted, after every step).
 */
#include "server/http.h"
#include "server_util.h"

#define BT 16 /* tokens per KV block (the server default) */

/* A completions body: the token ids, then extra fields. */
static char *body_of(const int32_t *ids, int n, int max_tokens, const char *extra) {
    sbuf b = {0};
    sbuf_printf(&b, "{\"prompt\":[");
    for (int i = 0; i < n; i++) sbuf_printf(&b, "%s%d", i ? "," : "", ids[i]);
    sbuf_printf(&b, "],\"max_tokens\":%d,\"temperature\":0%s%s}", max_tokens, *extra ? "," : "", extra);
    sbuf_put(&b, "", 1);
    return b.p;
}

static void random_ids(int32_t *ids, int n) {
    for (int i = 0; i < n; i++) ids[i] = 3 + (int32_t)(rng_u64() % 500);
}

/* Runs the scenario on a server with `policy`; returns the resumed turn's
 * cached prompt tokens (-1 on failure). */
static long scenario(const char *policy, int *n_a_prompt) {
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "1M", "--kv-policy", policy, NULL};
    int rc = srv_start(&s, flags);
    CHECK_MSG(rc == 0, "server (%s) did not start", policy);
    if (rc) return -1;
    long blocks = (long)metric(s.port, "kvloom_kv_blocks_total");
    CHECK_MSG(blocks >= 30 && blocks <= 400, "pool of %ld blocks", blocks);
    rng_state = 0x5eed5eed5eedull; /* the same prompts for both policies */
    /* agent A: a turn, then its tool runs (it says it will be back soon) */
    int na = 10 * BT;
    int32_t a[10 * BT + 64];
    random_ids(a, na);
    int st;
    char *b = body_of(a, na, 8, "\"kv_ttl\":300,\"kv_hint\":{\"next_use_s\":1}");
    json_t *r = post_json(s.port, "/v1/completions", b, &st);
    free(b);
    CHECK_EQ_INT(st, 200);
    json_decref(r);
    /* other clients fill the pool three times over (their turns unpinned:
     * kv_ttl 0): on LRU they push A out */
    int nb = 12 * BT, n_fill = (int)(3 * blocks * BT / nb) + 1;
    int32_t *f = xmalloc((size_t)nb * sizeof *f);
    int n_ok = 0;
    for (int i = 0; i < n_fill; i++) {
        random_ids(f, nb);
        b = body_of(f, nb, 4, "\"kv_ttl\":0");
        r = post_json(s.port, "/v1/completions", b, &st);
        free(b);
        n_ok += st == 200;
        json_decref(r);
    }
    free(f);
    CHECK_MSG(n_ok == n_fill, "%s: %d of %d filling requests answered 200", policy, n_ok, n_fill);
    if (!strcmp(policy, "agent")) {
        CHECK_EQ_INT((int)metric(s.port, "kvloom_kv_pins"), 1);
    } else {
        CHECK_EQ_INT((int)metric(s.port, "kvloom_kv_pins"), 0);
    }
    /* A resumes: its prompt, an answer, a tool result */
    random_ids(a + na, 40);
    b = body_of(a, na + 40, 4, "");
    r = post_json(s.port, "/v1/completions", b, &st);
    free(b);
    CHECK_EQ_INT(st, 200);
    long cached = usage_int(r, "cached_tokens");
    json_decref(r);
    if (!strcmp(policy, "agent")) {
        CHECK_MSG(metric(s.port, "kvloom_kv_pins_released_total{reason=\"resumed\"}") >= 1, "A's pin not resumed");
        /* kv_hint "done" drops the session's pin; kv_ttl 0 pins nothing */
        int32_t z[3 * BT];
        random_ids(z, 3 * BT);
        b = body_of(z, 3 * BT, 2, "\"prompt_cache_key\":\"agent-z\"");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        CHECK_EQ_INT(st, 200);
        double hint0 = metric(s.port, "kvloom_kv_pins_released_total{reason=\"hint\"}");
        b = body_of(z, BT, 2, "\"prompt_cache_key\":\"agent-z\",\"kv_hint\":\"done\"");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        CHECK_EQ_INT(st, 200);
        CHECK_MSG(metric(s.port, "kvloom_kv_pins_released_total{reason=\"hint\"}") == hint0 + 1, "hint done");
        double pins = metric(s.port, "kvloom_kv_pins");
        b = body_of(z, 2 * BT, 2, "\"kv_ttl\":0");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        CHECK_EQ_INT(st, 200);
        CHECK_MSG(metric(s.port, "kvloom_kv_pins") <= pins, "kv_ttl 0 pinned");
    }
    CHECK(wait_idle(s.port, 20));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    *n_a_prompt = na;
    return cached;
}

/* Every block pinned: pins nothing predicts yield to new requests; pins of
 * agents expected back make a new conversation wait until they expire (it
 * does not take a paused agent's context), then it runs; an agent coming
 * back takes what it needs from the others' pins (they yield, furthest
 * return first), and its own pinned prefix is served from the cache.
 * Nothing fails. */
static void check_all_pinned(void) {
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "1M", NULL};
    if (srv_start(&s, flags)) {
        CHECK_MSG(0, "server did not start");
        return;
    }
    rng_state = 0xa11b1eedull;
    long blocks = (long)metric(s.port, "kvloom_kv_blocks_total");
    int st, n_ok = 0, n = 0;
    /* pins nothing predicts fill the pool twice: kept until they expire
     * while the server cannot tell, then (they went unused) they yield to
     * new requests; all answer */
    int32_t f[12 * BT];
    for (long used = 0; used < 2 * blocks; used += 13, n++) {
        random_ids(f, 12 * BT);
        char *b = body_of(f, 12 * BT, 2, "\"kv_ttl\":1");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        n_ok += st == 200;
    }
    CHECK_MSG(n_ok == n, "unpredicted pins: %d of %d answered", n_ok, n);
    CHECK_MSG(metric(s.port, "kvloom_kv_pins_released_total{reason=\"expired\"}") > 0, "no pin expired");
    CHECK(wait_idle(s.port, 20));
    usleep(1200 * 1000);
    /* pins whose agents are expected back (kv_hint) fill it twice: a new
     * conversation does not take them, it waits until they expire (kv_ttl
     * 2 s), and all answer */
    double e0 = metric(s.port, "kvloom_kv_pins_released_total{reason=\"expired\"}");
    n_ok = n = 0;
    for (long used = 0; used < 2 * blocks; used += 13, n++) {
        random_ids(f, 12 * BT);
        char *b = body_of(f, 12 * BT, 2, "\"kv_ttl\":2,\"kv_hint\":{\"next_use_s\":1}");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        n_ok += st == 200;
    }
    CHECK_MSG(n_ok == n, "expected pins: %d of %d answered", n_ok, n);
    CHECK_MSG(metric(s.port, "kvloom_kv_pins_released_total{reason=\"expired\"}") > e0, "no expected pin expired");
    CHECK(wait_idle(s.port, 20));
    usleep(2200 * 1000); /* the last short pins expire */
    /* P: the agent that will come back (6 blocks pinned, back in 15 s: it
     * comes back early, before it would count as overdue) */
    int32_t p[6 * BT + 60];
    random_ids(p, 6 * BT + 60);
    char *b = body_of(p, 6 * BT, 2, "\"kv_ttl\":30,\"kv_hint\":{\"next_use_s\":15}");
    json_decref(post_json(s.port, "/v1/completions", b, &st));
    free(b);
    CHECK_EQ_INT(st, 200);
    /* long pins of other agents take the rest of the pool but a block */
    for (int i = 0; i < 64; i++) {
        long pinned = (long)metric(s.port, "kvloom_kv_pinned_blocks");
        long free_blocks = blocks - pinned;
        if (free_blocks <= 3) break;
        int k = free_blocks - 2 > 12 ? 12 : (int)free_blocks - 2;
        random_ids(f, k * BT);
        b = body_of(f, k * BT - 2, 1, "\"kv_ttl\":30,\"kv_hint\":{\"next_use_s\":20}");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        CHECK_EQ_INT(st, 200);
        /* the metrics are published after the step that answered: wait for
         * this pin to show, or the next request is sized on a stale count
         * (and waits for a pin to expire) */
        for (double t0 = su_now(); su_now() - t0 < 5 && (long)metric(s.port, "kvloom_kv_pinned_blocks") == pinned;)
            usleep(10 * 1000);
    }
    CHECK_MSG(blocks - (long)metric(s.port, "kvloom_kv_pinned_blocks") <= 3, "the pool is not full of pins");
    double y0 = metric(s.port, "kvloom_kv_pins_released_total{reason=\"yielded\"}");
    /* P comes back: 4 more blocks than it has */
    b = body_of(p, 6 * BT + 60, 2, "");
    json_t *r = post_json(s.port, "/v1/completions", b, &st);
    free(b);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(usage_int(r, "cached_tokens") >= 6 * BT, "P's resumed turn: %ld cached", usage_int(r, "cached_tokens"));
    json_decref(r);
    CHECK_MSG(metric(s.port, "kvloom_kv_pins_released_total{reason=\"yielded\"}") > y0, "no pin yielded to P");
    CHECK(wait_idle(s.port, 20));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

static void check_bad_fields(void) {
    srv s;
    const char *flags[] = {"--kv-mem", "2M", NULL};
    if (srv_start(&s, flags)) {
        CHECK_MSG(0, "server did not start");
        return;
    }
    static const struct {
        const char *field, *param;
    } cases[] = {
        {"\"kv_ttl\":\"long\"", "kv_ttl"},   {"\"kv_ttl\":-1", "kv_ttl"},         {"\"kv_ttl\":1e9", "kv_ttl"},
        {"\"kv_hint\":5", "kv_hint"},        {"\"kv_hint\":\"later\"", "kv_hint"}, {"\"kv_hint\":{}", "kv_hint"},
        {"\"kv_hint\":{\"next_use_s\":\"soon\"}", "kv_hint"},                     {"\"kv_hint\":{\"next_use_s\":-2}", "kv_hint"},
        {"\"prompt_cache_key\":5", "prompt_cache_key"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char b[256];
        snprintf(b, sizeof b, "{\"prompt\":\"Once\",\"max_tokens\":2,%s}", cases[i].field);
        int st;
        json_t *r = post_json(s.port, "/v1/completions", b, &st);
        json_t *err = json_object_get(r, "error");
        CHECK_MSG(st == 400, "%s: status %d", cases[i].field, st);
        CHECK_MSG(json_is_string(json_object_get(err, "param")) &&
                      !strcmp(json_string_value(json_object_get(err, "param")), cases[i].param),
                  "%s: param", cases[i].field);
        json_decref(r);
    }
    /* the good forms */
    int st;
    json_decref(post_json(s.port, "/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"kv_ttl\":5,"
                          "\"kv_hint\":{\"next_use_s\":2.5},\"prompt_cache_key\":\"k\",\"user\":\"u\"}",
                          &st));
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* kv_hint prefetch (--kv-disk): agent A's turn asks for no pin (kv_ttl 0)
 * but says when it is back (late enough for the fill to end first); other clients push its blocks out of RAM
 * (write-through put them on disk); ENGINE_HINT_LEAD_S (2 s) before its
 * return the server reads them back (kvloom_kv_hint_prefetched_tokens_total)
 * and pins them, so A's turn finds its prefix in RAM: no disk read at its
 * admission, its whole first prompt cached. (The same code runs under lru,
 * minus the pin.) */
static void check_hint_prefetch(const char *policy) {
    char dir[] = "/tmp/kvloom-hint-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp");
        return;
    }
    srv s;
    const char *flags[] = {"--check", "--kv-mem", "1M", "--kv-disk", dir, "--kv-policy", policy, NULL};
    if (srv_start(&s, flags)) {
        CHECK_MSG(0, "server (%s, --kv-disk) did not start", policy);
        return;
    }
    rng_state = 0x41e7ull;
    long blocks = (long)metric(s.port, "kvloom_kv_blocks_total");
    int na = 10 * BT, st;
    int32_t a[10 * BT + 40];
    random_ids(a, na + 40);
    /* the others will fill the pool three times over; one such request
     * first, timed, so that A's return is announced late enough for the
     * whole fill to end before its prefetch starts (sanitizer builds and a
     * busy machine are many times slower) */
    int nb = 12 * BT, n_fill = (int)(3 * blocks * BT / nb) + 1, n_ok = 0;
    int32_t f[12 * BT];
    random_ids(f, nb);
    double t0 = su_now();
    char *b = body_of(f, nb, 2, "\"kv_ttl\":0");
    json_decref(post_json(s.port, "/v1/completions", b, &st));
    free(b);
    double next_use = 2 + 3 * (su_now() - t0) * n_fill;
    if (next_use < 6) next_use = 6;
    char extra[160];
    snprintf(extra, sizeof extra, "\"kv_ttl\":0,\"kv_hint\":{\"next_use_s\":%.1f},\"prompt_cache_key\":\"agent-a\"",
             next_use);
    double t_a = su_now();
    b = body_of(a, na, 4, extra);
    json_decref(post_json(s.port, "/v1/completions", b, &st));
    free(b);
    CHECK_EQ_INT(st, 200);
    for (int i = 0; i < n_fill; i++) {
        random_ids(f, nb);
        b = body_of(f, nb, 2, "\"kv_ttl\":0");
        json_decref(post_json(s.port, "/v1/completions", b, &st));
        free(b);
        n_ok += st == 200;
    }
    CHECK_MSG(n_ok == n_fill, "%d of %d filling requests answered", n_ok, n_fill);
    CHECK_MSG(metric(s.port, "kvloom_kv_hint_prefetched_tokens_total") == 0,
              "prefetched during the fill (%.1f s, the return announced at %.1f s)", su_now() - t_a, next_use);
    /* the prefetch: 2 s before A's announced return */
    double pre = 0;
    while (su_now() - t_a < next_use + 20 && (pre = metric(s.port, "kvloom_kv_hint_prefetched_tokens_total")) < na - BT)
        usleep(50 * 1000);
    CHECK_MSG(pre >= na - BT, "%s: %.0f tokens prefetched (A's prompt: %d)", policy, pre, na);
    if (!strcmp(policy, "agent")) CHECK_MSG(metric(s.port, "kvloom_kv_pins") >= 1, "the prefetched prefix is not pinned");
    double restored = metric(s.port, "kvloom_kv_disk_restored_tokens_total");
    b = body_of(a, na + 40, 2, "\"prompt_cache_key\":\"agent-a\"");
    json_t *r = post_json(s.port, "/v1/completions", b, &st);
    free(b);
    CHECK_EQ_INT(st, 200);
    long cached = usage_int(r, "cached_tokens");
    json_decref(r);
    CHECK_MSG(cached >= na, "%s: A's turn had %ld cached tokens of %d", policy, cached, na);
    CHECK_MSG(metric(s.port, "kvloom_kv_disk_restored_tokens_total") == restored,
              "%s: A's admission read from disk (the prefetch did not hold)", policy);
    CHECK(wait_idle(s.port, 20));
    if (test_n_fail) srv_print_log(&s);
    CHECK_EQ_INT(srv_stop(&s), 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

int main(void) {
    (void)sse_text;
    (void)choice_text;
    (void)choice_finish;
    su_watchdog(300);
    int na = 0;
    long agent = scenario("agent", &na);
    long lru = scenario("lru", &na);
    /* A's whole first prompt (10 blocks) comes back from its pin; under LRU
     * the other agents' prompts pushed it out */
    CHECK_MSG(agent >= na, "agent policy: the resumed turn had %ld cached tokens of %d pinned", agent, na);
    CHECK_MSG(lru >= 0 && lru < na / 2, "lru: the resumed turn had %ld cached tokens (expected it evicted)", lru);
    check_all_pinned();
    check_bad_fields();
    check_hint_prefetch("agent");
    return test_summary("test_server_kvpolicy");
}
