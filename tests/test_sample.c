/*
 * test_sample.c — the sampler chain against hand-computed distributions:
 * greedy, temperature, top-k, top-p, min-p (empirical frequencies over many
 * seeded draws vs the exact truncated softmax), penalties (exact values),
 * seeding (same seed, same tokens), logprobs (exact log-softmax), range
 * checks on the parameters, and the row scans (row_max, row_argmax,
 * row_broken) against serial loops.
 */
#include <math.h>

#include "sample/sample.h"
#include "test.h"

#define V 6
static const float base[V] = {1.0f, 2.0f, 3.0f, 0.5f, 2.5f, -1.0f};

/* Exact probabilities of the chain for `p` over base logits (no penalties),
 * computed independently: sort, truncate, renormalise. */
static void expected_probs(const sampler_params *p, double *out) {
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (base[order[j]] > base[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    int keep = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    double w[V], sum = 0;
    for (int i = 0; i < keep; i++) sum += w[i] = exp((base[order[i]] - base[order[0]]) / p->temperature);
    if (p->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < keep; i++)
            if ((acc += w[i] / sum) >= p->top_p) {
                keep = i + 1;
                break;
            }
    }
    if (p->min_p > 0) {
        int k = 1;
        while (k < keep && w[k] >= p->min_p * w[0]) k++;
        keep = k;
    }
    double tot = 0;
    for (int i = 0; i < keep; i++) tot += w[i];
    for (int i = 0; i < V; i++) out[i] = 0;
    for (int i = 0; i < keep; i++) out[order[i]] = w[i] / tot;
}

static void check_distribution(sampler_params p, const char *what) {
    double want[V];
    expected_probs(&p, want);
    sampler *s = sampler_new(&p, V);
    const int N = 40000;
    int count[V] = {0};
    for (int i = 0; i < N; i++) {
        float l[V];
        memcpy(l, base, sizeof l);
        count[sampler_sample(s, l, -1, NULL, NULL, NULL)]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / N, sd = sqrt(want[i] * (1 - want[i]) / N);
        /* 6 standard deviations: with a fixed seed this is deterministic anyway */
        CHECK_MSG(fabs(f - want[i]) <= 6 * sd + 1e-9, "%s: token %d freq %.4f want %.4f", what, i, f, want[i]);
        if (want[i] == 0) CHECK_MSG(count[i] == 0, "%s: token %d drawn but truncated away", what, i);
    }
    sampler_free(s);
}

/* The row scans against serial loops: every length to 70 (vector groups
 * and the tail), rows with many ties (a few distinct values, the lowest
 * index must win), -inf rows, and a NaN or +inf at every place. */
static void test_row_scans(void) {
    static const float vals[] = {-INFINITY, -3.5f, -0.0f, 0.0f, 1.25f, 7.0f};
    float x[70];
    for (int round = 0; round < 3000; round++) {
        int n = (int)(rng_u64() % 71), nv = 1 + round % 6;
        for (int i = 0; i < n; i++)
            x[i] = round % 3 ? vals[rng_u64() % (uint64_t)nv] : (float)(int)(rng_u64() % 2001) / 16.0f - 60.0f;
        int serial = 0; /* the serial argmax with > */
        for (int i = 1; i < n; i++)
            if (x[i] > x[serial]) serial = i;
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
        CHECK(row_max(x, n) == mx);
        if (n > 0) CHECK_EQ_INT(row_argmax(x, n), serial);
        CHECK(!row_broken(x, n));
        if (n > 0) {
            int at = (int)(rng_u64() % (uint64_t)n);
            float keep = x[at];
            x[at] = round % 2 ? NAN : INFINITY;
            CHECK(row_broken(x, n));
            x[at] = -INFINITY; /* -inf is not broken */
            CHECK(!row_broken(x, n));
            x[at] = keep;
        }
    }
}

int main(void) {
    test_row_scans();
    sampler_params p = sampler_defaults();
    /* greedy */
    p.temperature = 0;
    sampler *s = sampler_new(&p, V);
    float l[V];
    memcpy(l, base, sizeof l);
    CHECK_EQ_INT(sampler_sample(s, l, -1, NULL, NULL, NULL), 2);
    float tie[V] = {0, 5, 1, 5, 0, 0};
    CHECK_EQ_INT(sampler_sample(s, tie, -1, NULL, NULL, NULL), 1); /* lowest id wins a tie */
    sampler_free(s);

    p = sampler_defaults();
    check_distribution(p, "plain t=1");
    p.temperature = 0.5f;
    check_distribution(p, "t=0.5");
    p.temperature = 1.5f;
    p.top_k = 3;
    check_distribution(p, "top_k=3");
    p = sampler_defaults();
    p.top_p = 0.8f;
    check_distribution(p, "top_p=0.8");
    p = sampler_defaults();
    p.min_p = 0.3f;
    check_distribution(p, "min_p=0.3");
    p.top_k = 4;
    p.top_p = 0.9f;
    p.temperature = 0.7f;
    check_distribution(p, "combined");

    /* seeding: same seed -> same sequence; another seed -> different */
    p = sampler_defaults();
    p.seed = 42;
    int32_t a[64], b[64], c[64];
    sampler *s1 = sampler_new(&p, V), *s2 = sampler_new(&p, V);
    p.seed = 43;
    sampler *s3 = sampler_new(&p, V);
    for (int i = 0; i < 64; i++) {
        memcpy(l, base, sizeof l);
        a[i] = sampler_sample(s1, l, -1, NULL, NULL, NULL);
        memcpy(l, base, sizeof l);
        b[i] = sampler_sample(s2, l, -1, NULL, NULL, NULL);
        memcpy(l, base, sizeof l);
        c[i] = sampler_sample(s3, l, -1, NULL, NULL, NULL);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    sampler_free(s1);
    sampler_free(s2);
    sampler_free(s3);

    /* penalties: history {2, 2, 4}; repeat 2 divides positive / multiplies
     * negative logits; presence 0.5 once per token; frequency 0.25 per use */
    p = sampler_defaults();
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    s = sampler_new(&p, V);
    sampler_accept(s, 2);
    sampler_accept(s, 2);
    sampler_accept(s, 4);
    sampler_accept(s, 5);
    memcpy(l, base, sizeof l);
    int32_t t = sampler_sample(s, l, -1, NULL, NULL, NULL);
    CHECK_NEAR(l[2], 3.0 / 2 - 0.5 - 0.5, 1e-6);  /* 0.5 */
    CHECK_NEAR(l[4], 2.5 / 2 - 0.5 - 0.25, 1e-6); /* 0.5 */
    CHECK_NEAR(l[5], -1.0 * 2 - 0.5 - 0.25, 1e-6);
    CHECK_NEAR(l[1], 2.0, 0);
    CHECK_EQ_INT(t, 1);
    sampler_free(s);
    /* the window: repeat_last_n = 2 forgets older tokens */
    p.presence_penalty = p.frequency_penalty = 0;
    p.repeat_last_n = 2;
    s = sampler_new(&p, V);
    sampler_accept(s, 2);
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    memcpy(l, base, sizeof l);
    sampler_sample(s, l, -1, NULL, NULL, NULL);
    CHECK_NEAR(l[2], 3.0, 0);
    CHECK_NEAR(l[1], 1.0, 1e-6);
    CHECK_NEAR(l[0], 0.5, 1e-6);
    sampler_free(s);

    /* logprobs: exact log-softmax, top list in decreasing order */
    p = sampler_defaults();
    p.temperature = 0;
    s = sampler_new(&p, V);
    memcpy(l, base, sizeof l);
    float lp, tlp[3];
    int32_t tid[3];
    t = sampler_sample(s, l, 3, &lp, tid, tlp);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(base[i]);
    CHECK_NEAR(lp, 3.0 - log(z), 1e-5);
    CHECK(tid[0] == 2 && tid[1] == 4 && tid[2] == 1);
    CHECK_NEAR(tlp[1], 2.5 - log(z), 1e-5);
    sampler_free(s);

    /* parameter checks */
    err_t e;
    p = sampler_defaults();
    p.top_p = 0;
    CHECK(sampler_params_check(&p, &e) == ERR_RANGE && strstr(e.msg, "top_p"));
    p = sampler_defaults();
    p.temperature = -1;
    CHECK(sampler_params_check(&p, &e) == ERR_RANGE && strstr(e.msg, "temperature"));
    p = sampler_defaults();
    p.presence_penalty = 3;
    CHECK(sampler_params_check(&p, &e) == ERR_RANGE && strstr(e.msg, "presence_penalty"));
    p = sampler_defaults();
    p.temperature = NAN;
    CHECK(sampler_params_check(&p, &e) == ERR_RANGE);
    p = sampler_defaults();
    CHECK(sampler_params_check(&p, &e) == 0);

    /* NaN / +inf logits are refused (-1), never crash the selection, on
     * every path: greedy, top-k, logprobs; -inf (masked) tokens are never
     * picked. A large vocabulary takes the quickselect path. */
    enum { NV = 5000 };
    float *big = malloc(NV * sizeof *big), *top_lps = malloc(20 * sizeof *top_lps);
    int32_t *top_ids = malloc(20 * sizeof *top_ids);
    for (int mode = 0; mode < 3; mode++) {
        sampler_params q = sampler_defaults();
        q.temperature = mode == 0 ? 0.0f : 0.8f;
        q.top_k = mode == 2 ? 40 : 0;
        q.seed = 7;
        sampler *sb = sampler_new(&q, NV);
        for (int bad = 0; bad < 2; bad++) {
            for (int i = 0; i < NV; i++) big[i] = (float)((i * 37) % 101) / 10.0f;
            big[NV / 3] = bad ? INFINITY : NAN;
            float lp;
            CHECK_EQ_INT(sampler_sample(sb, big, 20, &lp, top_ids, top_lps), -1);
        }
        for (int i = 0; i < NV; i++) big[i] = i % 7 == 3 ? (float)(i % 13) : -INFINITY;
        for (int r = 0; r < 20; r++) {
            float lp, tmp[NV];
            memcpy(tmp, big, sizeof tmp);
            int32_t t = sampler_sample(sb, tmp, 5, &lp, top_ids, top_lps);
            CHECK_MSG(t >= 0 && t % 7 == 3, "mode %d picked %d", mode, t);
        }
        sampler_free(sb);
    }
    free(big), free(top_lps), free(top_ids);
    return test_summary("test_sample");
}
