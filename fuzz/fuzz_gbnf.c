/*
 * fuzz_gbnf.c — libFuzzer target for the grammar engine: arbitrary bytes are
 * parsed as GBNF (grammar_from_gbnf must return an error or a grammar, never
 * crash, leak or hang), and a grammar that compiles is run:
 *
 *   input = GBNF text [ NUL  bytes to feed ]
 *
 * The bytes after the first NUL (or, without one, the text itself) are fed
 * in chunks of 1..4 bytes; a refused chunk is skipped. Along the way the
 * target checks the engine's own promises: a refused chunk leaves the state
 * unchanged, a forced run is accepted, must_end implies can_end, and the
 * mask over a small vocabulary cut from the input agrees token by token with
 * accepting each token on a clone.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

typedef struct fvocab {
    const uint8_t *p;
    size_t n;
} fvocab;

/* Token id: bytes [id*3 % n, +1 + id % 5) of the feed, token 0 is EOG. */
static int fpiece(void *ctx, int32_t id, char *buf, int cap) {
    const fvocab *v = ctx;
    if (id == 0 || v->n == 0) return 0;
    size_t off = ((size_t)id * 3) % v->n, len = 1 + (size_t)id % 5;
    if (off + len > v->n) len = v->n - off;
    memcpy(buf, v->p + off, len < (size_t)cap ? len : (size_t)cap);
    return (int)len;
}

static void check_mask(gmatch *m, int n_vocab) {
    uint64_t mask[2] = {0, 0};
    int count = gmatch_mask(m, mask), n_set = 0;
    for (int id = 0; id < n_vocab; id++) {
        int in = (int)(mask[id >> 6] >> (id & 63) & 1);
        gmatch *c = gmatch_clone(m);
        int ok = gmatch_accept(c, id) == 0;
        gmatch_free(c);
        if (in != ok) __builtin_trap();
        n_set += in;
    }
    if (count != n_set) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *feed = nul ? nul + 1 : data;
    size_t n_feed = nul ? size - glen - 1 : size;
    grammar *g = NULL;
    err_t e = {0};
    if (grammar_from_gbnf((const char *)data, glen, &g, &e) != 0) {
        if (g || e.msg[0] == 0) __builtin_trap(); /* errors always say what */
        return 0;
    }
    fvocab fv = {feed, n_feed};
    enum { N_VOCAB = 96 };
    uint8_t kind[N_VOCAB] = {0};
    kind[0] = GV_EOG;
    kind[N_VOCAB - 1] = GV_NEVER;
    gvocab *v = gvocab_new(N_VOCAB, fpiece, &fv, kind);
    if (size & 1) grammar_set_cache_bytes(g, 0); /* exercise eviction */
    gmatch *m = gmatch_new(g, v);
    char forced[64];
    size_t pos = 0;
    int steps = 0;
    while (pos < n_feed && steps++ < 256) {
        size_t k = 1 + feed[pos] % 4;
        if (pos + k > n_feed) k = n_feed - pos;
        bool end_before = gmatch_can_end(m);
        if (gmatch_accept_bytes(m, (const char *)feed + pos, k) != 0 && gmatch_can_end(m) != end_before)
            __builtin_trap(); /* a refusal changed the state */
        if (gmatch_must_end(m) && !gmatch_can_end(m)) __builtin_trap();
        if (steps % 8 == 1) check_mask(m, N_VOCAB);
        int nf = gmatch_forced(m, forced, (int)sizeof forced);
        if (nf > 0 && gmatch_accept_bytes(m, forced, (size_t)nf) != 0) __builtin_trap();
        pos += k;
    }
    check_mask(m, N_VOCAB);
    gmatch_free(m);
    gvocab_free(v);
    grammar_unref(g);
    return 0;
}
