/*
 * fuzz_regex.c — libFuzzer target for the pattern compiler (grammar/regex.c):
 * the first byte chooses the parse flags, the rest is a pattern. What parses
 * is written as GBNF, which grammar_from_gbnf must accept (within its size
 * limits), and is compared with itself and with a fixed pattern by
 * regex_subset: a language always includes itself (the answer may be
 * "unknown" when too large, never "no"), and the answers must not change
 * when asked twice. Patterns with lookaheads (and every pattern intersected
 * with a length range) go through regex_dfa_build: each transition's set
 * must be non-empty and its target in range, and the automaton's language
 * must include itself. Nothing may crash, leak or assert.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    unsigned flags = data[0] & 1 ? REGEX_LOOKAHEAD : 0;
    regex_pat p;
    err_t e = {0};
    if (regex_parse((const char *)data + 1, size - 1, flags, &p, &e)) return 0;
    if (!p.n_look) {
        sbuf b = {0};
        sbuf_puts(&b, "root ::= \"\\\"\" ");
        regex_emit(&b, p.r);
        sbuf_puts(&b, " \"\\\"\"\n");
        grammar *g = NULL;
        int rc = grammar_from_gbnf(b.p, b.n, &g, &e);
        if (rc != 0 && rc != ERR_RANGE) abort();
        grammar_unref(g);
        sbuf_free(&b);
        if (regex_subset(&p, &p) == 0) abort();
        regex_pat q;
        static const char fixed[] = "^[a-z0-9.]+@[a-z]+\\.[a-z]{2,}$";
        if (regex_parse(fixed, sizeof fixed - 1, 0, &q, &e) == 0) {
            int a1 = regex_subset(&p, &q), a2 = regex_subset(&p, &q);
            if (a1 != a2) abort();
            a1 = regex_subset(&q, &p);
            if (a1 != regex_subset(&q, &p)) abort();
            regex_pat_free(&q);
        }
        long long lo, hi;
        regex_len(p.r, &lo, &hi);
        if (lo < 0 || (hi >= 0 && hi < lo)) abort();
    }
    if (regex_subset(&p, &p) == 0) abort();
    if (size > 2 && (data[0] & 2)) regex_and_len(&p, data[1] % 4, data[1] % 4 + data[2] % 8);
    regex_dfa d;
    int rc = regex_dfa_build(&p, 256, &d);
    if (rc == 0) {
        if (d.n < 1) abort();
        for (int i = 0; i < d.n; i++)
            for (int k = 0; k < d.n_tr[i]; k++)
                if (!d.tr[i][k].set.n || d.tr[i][k].to < 0 || d.tr[i][k].to >= d.n) abort();
        regex_dfa_free(&d);
    } else if (rc != 1 && rc != -1) abort();
    regex_pat_free(&p);
    return 0;
}
