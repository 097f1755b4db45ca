/*
 * test_stop.c — the stop-string matcher (server/stop.h) against a
 * naive reference: for random texts, random stop sets and random chunkings
 * (tokens), generation stops after the first chunk at which the text so far
 * contains a stop string, and the released text must equal the text cut at
 * the earliest occurrence then present; held text must never exceed the
 * longest stop string.
 */
#include "server/stop.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "test.h"

static uint64_t rs = 88172645463325252ull;
static unsigned rnd(unsigned n) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (unsigned)(rs % n);
}

/* Reference: the text before the earliest occurrence of any stop string. */
static size_t ref_cut(const char *text, size_t n, char **stops, int n_stops, bool *hit) {
    *hit = false;
    for (size_t i = 0; i < n; i++)
        for (int s = 0; s < n_stops; s++) {
            size_t l = strlen(stops[s]);
            if (l && i + l <= n && memcmp(text + i, stops[s], l) == 0) {
                *hit = true;
                return i;
            }
        }
    return n;
}

int main(void) {
    /* A hand-checked case: the stop string split across chunks. */
    char *st1[] = {"\n\n"};
    stop_matcher *m = stop_new(st1, 1);
    const char *out;
    size_t n;
    CHECK(!stop_feed(m, "Hi\n", 3, &out, &n));
    CHECK(n == 2 && !memcmp(out, "Hi", 2));
    CHECK(!stop_feed(m, "there", 5, &out, &n));
    CHECK(n == 6 && !memcmp(out, "\nthere", 6));
    CHECK(stop_feed(m, "!\n\nX", 4, &out, &n));
    CHECK(n == 1 && out[0] == '!');
    CHECK(stop_matched(m));
    CHECK(stop_feed(m, "more", 4, &out, &n) && n == 0);
    stop_free(m);
    /* No stop strings: everything passes through at once. */
    m = stop_new(NULL, 0);
    CHECK(!stop_feed(m, "abc", 3, &out, &n) && n == 3);
    stop_flush(m, &out, &n);
    CHECK(n == 0);
    stop_free(m);
    stop_free(NULL);

    /* Randomized differential test over a small alphabet (many partial matches). */
    for (int iter = 0; iter < 3000; iter++) {
        char text[200];
        size_t tn = rnd(120);
        for (size_t i = 0; i < tn; i++) text[i] = "abc\n"[rnd(4)];
        text[tn] = 0;
        int n_stops = (int)rnd(4);
        char *stops[4];
        size_t longest = 0;
        for (int s = 0; s < n_stops; s++) {
            size_t l = rnd(5); /* empty strings are ignored */
            stops[s] = xmalloc(l + 1);
            for (size_t i = 0; i < l; i++) stops[s][i] = "abc\n"[rnd(4)];
            stops[s][l] = 0;
            longest = MAX(longest, l);
        }
        size_t chunks[200];
        int n_chunks = 0;
        for (size_t p = 0; p < tn;) {
            size_t k = 1 + rnd(6);
            if (p + k > tn) k = tn - p;
            chunks[n_chunks++] = k;
            p += k;
        }
        /* Reference: scan every prefix ending at a chunk boundary. */
        bool hit = false;
        size_t cut = tn;
        for (size_t c = 0, end = 0; c < (size_t)n_chunks && !hit; c++) {
            end += chunks[c];
            cut = ref_cut(text, end, stops, n_stops, &hit);
            if (!hit) cut = tn;
        }
        m = stop_new(stops, n_stops);
        int ci = 0;
        char got[256];
        size_t gn = 0, pos = 0;
        bool matched = false, ok = true;
        while (pos < tn && !matched) {
            size_t k = chunks[ci++];
            matched = stop_feed(m, text + pos, k, &out, &n);
            memcpy(got + gn, out, n);
            gn += n;
            pos += k;
            /* Held text is a proper prefix of a stop string. */
            if (!matched && pos - gn > (longest ? longest - 1 : 0)) ok = false;
        }
        if (!matched) {
            stop_flush(m, &out, &n);
            memcpy(got + gn, out, n);
            gn += n;
        }
        CHECK_MSG(ok, "iter %d: held too much", iter);
        CHECK_MSG(matched == hit, "iter %d: matched %d, reference %d", iter, matched, hit);
        CHECK_MSG(gn == cut && memcmp(got, text, cut) == 0, "iter %d: released %zu bytes, reference %zu", iter, gn, cut);
        stop_free(m);
        for (int s = 0; s < n_stops; s++) free(stops[s]);
    }
    return test_summary("test_stop");
}
