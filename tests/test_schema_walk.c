/*
 * test_schema_walk.c — random token walks over grammars compiled from JSON
 * Schemas (schema.c ──▶ grammar_from_gbnf ──▶ gmatch over the Qwen3
 * vocabulary).
 *
 * Two modes:
 *
 *   test_schema_walk
 *       the unit mode run by `make test`: a fixed set of schemas, walks whose
 *       self-consistency is checked in C (every sampled token is accepted,
 *       refused tokens are refused by gmatch_accept_bytes too, forced runs are
 *       accepted, completed outputs are accepted again from the start and can
 *       end there, mask counts are positive).
 *
 *   test_schema_walk --walk SCHEMAS.jsonl CASES.jsonl SEED WALKS
 *       the differential mode driven by tests/grammar_diff_test.sh: for every
 *       schema (one a line, from tools/grammar/gen_schemas.py) WALKS walks,
 *       the same C checks, and the evidence for the independent Python
 *       checker written to CASES.jsonl, one object a line:
 *         {"sid": line, "kind": "complete"|"prefix"|"refused"|"notend",
 *          "hex": bytes}
 *       complete: the matcher could end there; prefix: the matcher accepted
 *       it; refused: a prefix plus a token the mask refused; notend: the
 *       matcher could not end there.

 *   test_schema_walk --corpus SCHEMAS.jsonl CASES.jsonl SEED WALKS
 *       the corpus mode driven by tests/schema_corpus_test.sh (see
 *       corpus_file).
 *
 * A walk samples allowed tokens at random (at times only tokens holding a
 * closing '"', ']' or '}', so that walks end), sometimes takes the forced
 * run instead, and stops at must_end, at random where it can end, or at a
 * length cap.
 */
#include <jansson.h>

#include "grammar/grammar.h"
#include "grammar/schema.h"
#include "tok/hfimport.h"
#include "tok/tok.h"
#include "test.h"

#define WALK_MAX_TOKENS 160
#define WALK_MAX_BYTES 600
#define WALK_BUF 8192 /* the longest output, corpus walks included */

typedef struct {
    tokenizer *tk;
    gvocab *v;
    int n_vocab;
    uint8_t *kind;
    char **piece;     /* bytes of each token              */
    int *piece_len;
    bool *closer;     /* holds '"', ']' or '}'            */
    FILE *cases;      /* NULL in unit mode                */
    int32_t *allowed; /* scratch                          */
    int32_t short_ids[128]; /* the printable ASCII one-byte tokens */
    int n_short;
    uint64_t *mask;
    long n_cases;
    int max_tokens, max_bytes; /* walk caps                             */
    const char *skip;          /* corpus mode: the relaxed keywords, as a
                                  JSON array; only completed outputs are
                                  written, as "valid" cases              */
} walker;

static int vocab_piece(void *ctx, int32_t id, char *buf, int cap) {
    return tok_piece((const tokenizer *)ctx, id, buf, cap);
}

static bool walker_init(walker *w) {
    memset(w, 0, sizeof *w);
    w->tk = test_load_hf_tokenizer("qwen3", "tokenizer_config.json");
    if (!w->tk) return false;
    w->n_vocab = tok_n_vocab(w->tk);
    w->kind = xmalloc((size_t)w->n_vocab);
    w->piece = xcalloc((size_t)w->n_vocab, sizeof *w->piece);
    w->piece_len = xcalloc((size_t)w->n_vocab, sizeof *w->piece_len);
    w->closer = xcalloc((size_t)w->n_vocab, sizeof *w->closer);
    for (int i = 0; i < w->n_vocab; i++) {
        int ty = tok_type(w->tk, i);
        w->kind[i] = tok_is_eog(w->tk, i) ? GV_EOG
                     : (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED) ? GV_NEVER
                                                                          : GV_NORMAL;
        char buf[256];
        int n = tok_piece(w->tk, i, buf, sizeof buf);
        if (n < 0) n = 0;
        if (n > (int)sizeof buf) n = sizeof buf; /* never in Qwen3; the walk uses what fits */
        w->piece[i] = xmalloc((size_t)n + 1);
        memcpy(w->piece[i], buf, (size_t)n);
        w->piece_len[i] = n;
        if (n == 1 && buf[0] >= 0x20 && buf[0] < 0x7f && w->kind[i] == GV_NORMAL && w->n_short < 128)
            w->short_ids[w->n_short++] = i;
        w->closer[i] = memchr(buf, '"', (size_t)n) || memchr(buf, ']', (size_t)n) || memchr(buf, '}', (size_t)n);
    }
    w->v = gvocab_new(w->n_vocab, vocab_piece, w->tk, w->kind);
    w->allowed = xmalloc(sizeof *w->allowed * (size_t)w->n_vocab);
    w->mask = xcalloc(((size_t)w->n_vocab + 63) / 64, sizeof *w->mask);
    w->max_tokens = WALK_MAX_TOKENS;
    w->max_bytes = WALK_MAX_BYTES;
    return true;
}

static void walker_free(walker *w) {
    for (int i = 0; i < w->n_vocab; i++) free(w->piece[i]);
    free(w->piece);
    free(w->piece_len);
    free(w->closer);
    free(w->kind);
    free(w->allowed);
    free(w->mask);
    gvocab_free(w->v);
    tok_free(w->tk);
}

static void emit_case(walker *w, int sid, const char *kind, const char *a, size_t na, const char *b, size_t nb) {
    if (!w->cases) return;
    if (w->skip && strcmp(kind, "complete")) return;
    fprintf(w->cases, "{\"sid\": %d, \"kind\": \"%s\", \"hex\": \"", sid, w->skip ? "valid" : kind);
    for (size_t i = 0; i < na; i++) fprintf(w->cases, "%02x", (unsigned char)a[i]);
    for (size_t i = 0; i < nb; i++) fprintf(w->cases, "%02x", (unsigned char)b[i]);
    if (w->skip) fprintf(w->cases, "\", \"skip\": %s}\n", w->skip);
    else fprintf(w->cases, "\"}\n");
    w->n_cases++;
}

static bool mask_has(const uint64_t *m, int id) { return (m[id >> 6] >> (id & 63)) & 1; }

/* The output so far is accepted from the start again, and can end there
 * exactly when `can_end` says. */
static void check_replay(walker *w, grammar *g, const char *out, size_t n, bool can_end, const char *what) {
    gmatch *m = gmatch_new(g, w->v);
    int rc = gmatch_accept_bytes(m, out, n);
    CHECK_MSG(rc == 0, "%s: output (%zu bytes) refused on replay: %.*s", what, n, (int)MIN(n, 200), out);
    if (rc == 0) CHECK_MSG(gmatch_can_end(m) == can_end, "%s: can_end differs on replay: %.*s", what, (int)MIN(n, 200), out);
    gmatch_free(m);
}

/* A completed output with one byte replaced, inserted or deleted, judged by
 * the matcher from the start; the verdict goes to Python as a case. */
static void mutate(walker *w, grammar *g, int sid, const char *out, size_t n) {
    static const char bytes[] = "\"{}[],: 0123456789-.eEtrufalsn\\xé";
    static char buf[WALK_BUF + 8];
    if (w->skip) return; /* corpus mode: valid outputs only */
    for (int k = 0; k < 2 && n > 0; k++) {
        size_t at = rng_u64() % n, m = n;
        memcpy(buf, out, n);
        char c = bytes[rng_u64() % (sizeof bytes - 1)];
        switch (rng_u64() % 3) {
        case 0: buf[at] = c; break;
        case 1:
            memmove(buf + at + 1, buf + at, n - at);
            buf[at] = c;
            m++;
            break;
        default:
            memmove(buf + at, buf + at + 1, n - at - 1);
            m--;
        }
        gmatch *mm = gmatch_new(g, w->v);
        int rc = gmatch_accept_bytes(mm, buf, m);
        if (rc) emit_case(w, sid, "refused", buf, m, NULL, 0);
        else {
            emit_case(w, sid, "prefix", buf, m, NULL, 0);
            emit_case(w, sid, gmatch_can_end(mm) ? "complete" : "notend", buf, m, NULL, 0);
        }
        gmatch_free(mm);
    }
}

/* One walk; returns true when it completed. */
static bool walk(walker *w, grammar *g, int sid, const char *what) {
    gmatch *m = gmatch_new(g, w->v);
    static char out[WALK_BUF];
    size_t n = 0;
    bool done = false;
    int n_prefix_cases = 0;
    for (int step = 0; step < w->max_tokens && n < (size_t)w->max_bytes; step++) {
        bool can_end = gmatch_can_end(m), must_end = gmatch_must_end(m);
        if (can_end && (must_end || rng_u64() % 3 == 0)) {
            emit_case(w, sid, "complete", out, n, NULL, 0);
            check_replay(w, g, out, n, true, what);
            mutate(w, g, sid, out, n);
            done = true;
            break;
        }
        if (!can_end && rng_u64() % 8 == 0) emit_case(w, sid, "notend", out, n, NULL, 0);
        CHECK_MSG(!must_end || can_end, "%s: must_end without can_end", what);
        /* forced run */
        if (rng_u64() % 4 == 0) {
            char fb[256];
            int nf = gmatch_forced(m, fb, sizeof fb);
            if (nf > 0) {
                nf = MIN(nf, (int)(sizeof out - n));
                gmatch *c = gmatch_clone(m);
                int rc = gmatch_accept_bytes(m, fb, (size_t)nf);
                CHECK_MSG(rc == 0, "%s: forced run refused: %.*s", what, nf, fb);
                /* forced means: every continuation starts with it; a different first byte is refused */
                char alt = (char)(fb[0] ^ 0x01);
                CHECK_MSG(gmatch_accept_bytes(c, &alt, 1) != 0, "%s: byte beside a forced run accepted after %.*s",
                          what, (int)MIN(n, 200), out);
                gmatch_free(c);
                if (rc) break;
                memcpy(out + n, fb, (size_t)nf);
                n += (size_t)nf;
                continue;
            }
        }
        memset(w->mask, 0, ((size_t)w->n_vocab + 63) / 64 * sizeof *w->mask);
        int cnt = gmatch_mask(m, w->mask);
        CHECK_MSG(cnt > 0, "%s: empty mask after %.*s", what, (int)MIN(n, 200), out);
        if (cnt <= 0) break;
        int n_allowed = 0, n_closers = 0, n_eog = 0, never = -1;
        /* the set bits, word by word (a string state allows ~147k of the
         * 152k tokens; testing every id's bit was most of this test's time) */
        for (size_t wd = 0, n_words = ((size_t)w->n_vocab + 63) / 64; wd < n_words; wd++) {
            for (uint64_t bits = w->mask[wd]; bits; bits &= bits - 1) {
                int id = (int)(wd * 64 + (size_t)__builtin_ctzll(bits));
                if (id >= w->n_vocab) break;
                if (w->kind[id] == GV_EOG) {
                    n_eog++;
                    continue;
                }
                if (w->kind[id] != GV_NORMAL) never = id;
                w->allowed[n_allowed++] = id;
                if (w->closer[id]) n_closers++;
            }
        }
        CHECK_MSG(never < 0, "%s: GV_NEVER token %d allowed", what, never);
        CHECK_MSG((n_eog > 0) == can_end, "%s: EOG allowed %d, can_end %d after %.*s", what, n_eog, can_end,
                  (int)MIN(n, 200), out);
        CHECK_MSG(n_allowed + n_eog == cnt, "%s: mask count %d, bits %d", what, cnt, n_allowed + n_eog);
        if (n_allowed == 0) {
            CHECK_MSG(must_end, "%s: only EOG allowed but must_end false", what);
            break;
        }
        /* the mask agrees with accept_bytes on random tokens, allowed or not
         * (plain tokens are masked by count, the others by the trie walk) */
        for (int k = 0; k < 24; k++) {
            int id = (int)(rng_u64() % (uint64_t)w->n_vocab);
            if (w->kind[id] != GV_NORMAL || w->piece_len[id] == 0) continue;
            gmatch *c = gmatch_clone(m);
            bool ok = gmatch_accept_bytes(c, w->piece[id], (size_t)w->piece_len[id]) == 0;
            CHECK_MSG(ok == mask_has(w->mask, id), "%s: token %d (%.*s): mask %d, accept_bytes %d after %.*s", what, id,
                      w->piece_len[id], w->piece[id], mask_has(w->mask, id), ok, (int)MIN(n, 200), out);
            gmatch_free(c);
        }
        /* refused tokens: a few, checked by accept_bytes here and by Python */
        for (int k = 0; k < 2; k++) {
            int id = (int)(rng_u64() % (uint64_t)w->n_vocab);
            if (mask_has(w->mask, id) || w->kind[id] != GV_NORMAL || w->piece_len[id] == 0) continue;
            gmatch *c = gmatch_clone(m);
            CHECK_MSG(gmatch_accept_bytes(c, w->piece[id], (size_t)w->piece_len[id]) != 0,
                      "%s: token %d refused by the mask but its bytes accepted", what, id);
            gmatch_free(c);
            if (rng_u64() % 3 == 0) emit_case(w, sid, "refused", out, n, w->piece[id], (size_t)w->piece_len[id]);
        }
        /* and the structural bytes, where a wrongly refused '}' or ']' would show */
        if (rng_u64() % 2 == 0)
            for (int k = 0; k < w->n_short; k++)
                if (strchr("}],\" :0", w->piece[w->short_ids[k]][0]) && !mask_has(w->mask, w->short_ids[k]))
                    emit_case(w, sid, "refused", out, n, w->piece[w->short_ids[k]], 1);
        /* pick: toward closers as the walk grows */
        int id;
        bool want_close = n_closers > 0 && rng_u64() % 100 < (uint64_t)MIN(90, 20 + step);
        if (want_close) {
            int k = (int)(rng_u64() % (uint64_t)n_closers);
            id = -1;
            for (int i = 0; i < n_allowed; i++)
                if (w->closer[w->allowed[i]] && k-- == 0) {
                    id = w->allowed[i];
                    break;
                }
        } else id = w->allowed[rng_u64() % (uint64_t)n_allowed];
        int rc = gmatch_accept(m, id);
        CHECK_MSG(rc == 0, "%s: allowed token %d refused by accept", what, id);
        if (rc) break;
        memcpy(out + n, w->piece[id], (size_t)w->piece_len[id]);
        n += (size_t)w->piece_len[id];
        if (n_prefix_cases < 6 && rng_u64() % 4 == 0) {
            emit_case(w, sid, "prefix", out, n, NULL, 0);
            n_prefix_cases++;
        }
    }
    if (!done) emit_case(w, sid, "prefix", out, n, NULL, 0);
    gmatch_free(m);
    return done;
}

/* Compiles a schema to a grammar, or NULL (with *rc and e set). */
static grammar *compile(const char *schema_text, int *rc, err_t *e) {
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_REJECT_DUPLICATES, &je);
    if (!s) {
        *rc = err_set(e, ERR_FORMAT, "schema JSON: %s", je.text);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0;
    *rc = schema_to_gbnf(s, "root", &buf, &len, e);
    json_decref(s);
    grammar *g = NULL;
    if (*rc == 0) {
        *rc = grammar_from_gbnf(buf, len, &g, e);
        CHECK_MSG(*rc == 0, "grammar_from_gbnf refused schema.c output: %s\nschema %s\n%s", e->msg, schema_text,
                  buf);
    }
    free(buf);
    return g;
}

static const char *const unit_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\",\"items\":"
    "{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3}},\"required\":[\"name\"]}",
    "{\"type\":\"string\",\"pattern\":\"^[a-z]{2,4}-\\\\d{3}$\"}",
    "{\"type\":\"string\",\"format\":\"date-time\"}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"type\":\"null\"}],\"items\":false}",
    "{\"anyOf\":[{\"type\":\"integer\",\"minimum\":-5,\"maximum\":100},{\"type\":\"string\",\"format\":\"uuid\"}]}",
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":"
    "[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/n\"}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
    "{}",
};

static int walk_file(walker *w, const char *schemas_path, const char *cases_path, int walks) {
    FILE *f = fopen(schemas_path, "r");
    CHECK_MSG(f != NULL, "open %s", schemas_path);
    if (!f) return 1;
    w->cases = fopen(cases_path, "w");
    CHECK_MSG(w->cases != NULL, "open %s", cases_path);
    if (!w->cases) {
        fclose(f);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int sid = 0, n_ok = 0, n_refused = 0, n_done = 0, n_walks = 0;
    while ((got = getline(&line, &cap, f)) > 0) {
        err_t e = {0};
        int rc;
        grammar *g = compile(line, &rc, &e);
        if (!g) {
            if (rc == ERR_UNSUPPORTED || rc == ERR_INVALID || rc == ERR_RANGE) {
                n_refused++;
                fprintf(stderr, "schema %d not compiled (%s): %s\n", sid, err_name(rc), e.msg);
            }
        } else {
            n_ok++;
            char what[64];
            snprintf(what, sizeof what, "schema %d", sid);
            for (int k = 0; k < walks; k++) {
                n_done += walk(w, g, sid, what);
                n_walks++;
            }
            grammar_unref(g);
        }
        sid++;
    }
    free(line);
    fclose(f);
    fclose(w->cases);
    w->cases = NULL;
    printf("walk: %d schemas (%d compiled, %d refused by schema.c), %d walks (%d completed), %ld cases\n", sid,
           n_ok, n_refused, n_walks, n_done, w->n_cases);
    /* most generated schemas are within the subset */
    CHECK_MSG(n_ok * 10 >= sid * 7, "only %d of %d generated schemas compiled", n_ok, sid);
    return 0;
}


/* The keyword names of a relaxed list ("kw at /ptr, kw at /ptr") as a JSON
 * array. */
static char *skip_json(const char *relaxed) {
    json_t *a = json_array();
    for (const char *p = relaxed; p && *p;) {
        const char *at = strstr(p, " at ");
        if (!at) break;
        json_t *k = json_stringn(p, (size_t)(at - p));
        bool dup = false;
        for (size_t i = 0; i < json_array_size(a); i++) dup |= json_equal(json_array_get(a, i), k);
        if (!dup) json_array_append(a, k);
        json_decref(k);
        const char *next = strstr(at, ", ");
        p = next ? next + 2 : NULL;
    }
    char *t = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The corpus mode: every schema of tests/schemas/ (one {"origin",
 * "schema"} a line) compiles relaxed (never refused), strict compiles
 * exactly when nothing was relaxed (else its error names a keyword and a
 * pointer), and WALKS random walks write their complete outputs as "valid"
 * cases for jsonschema_check.py corpus, with the relaxed keywords. */
static int corpus_file(walker *w, const char *schemas_path, const char *cases_path, int walks) {
    FILE *f = fopen(schemas_path, "r");
    CHECK_MSG(f != NULL, "open %s", schemas_path);
    if (!f) return 1;
    w->cases = fopen(cases_path, "w");
    CHECK_MSG(w->cases != NULL, "open %s", cases_path);
    if (!w->cases) {
        fclose(f);
        return 1;
    }
    w->max_tokens = 400;
    w->max_bytes = 3000;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int sid = 0, n_exact = 0, n_relaxed = 0, n_done = 0, n_walks = 0, n_fail = 0, n_stuck = 0;
    json_t *kw_count = json_object();
    double *ms = xmalloc(sizeof *ms * 100000);
    while ((got = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *doc = json_loads(line, 0, &je);
        CHECK_MSG(doc != NULL, "%s line %d: %s", schemas_path, sid + 1, je.text);
        json_t *schema = doc && json_is_object(doc) && json_object_get(doc, "schema") ? json_object_get(doc, "schema") : doc;
        const char *origin = json_string_value(json_object_get(doc, "origin"));
        char what[256];
        snprintf(what, sizeof what, "corpus %d (%s)", sid, origin ? origin : "?");
        char *buf = NULL, *relaxed = NULL;
        size_t len = 0;
        err_t e = {0};
        grammar *g = NULL;
        int64_t t0 = clock_ns();
        int rc = schema ? schema_compile(schema, "root", false, &relaxed, &buf, &len, &e) : ERR_FORMAT;
        if (rc == 0) rc = grammar_from_gbnf(buf, len, &g, &e);
        if (sid < 100000) ms[sid] = (double)(clock_ns() - t0) / 1e6;
        CHECK_MSG(rc == 0, "%s does not compile relaxed: %s", what, e.msg);
        if (rc) n_fail++;
        /* strict: compiles exactly when nothing was relaxed */
        char *sbuf = NULL;
        size_t slen = 0;
        err_t se = {0};
        int src = schema ? schema_compile(schema, "root", true, NULL, &sbuf, &slen, &se) : ERR_FORMAT;
        if (rc == 0) {
            /* oneOf is written as anyOf in both modes (docs/grammar.md); only the
             * relaxed compile reports it */
            bool only_oneof = relaxed != NULL;
            for (const char *q = relaxed; q && *q && only_oneof; q = strstr(q, ", ") ? strstr(q, ", ") + 2 : "")
                only_oneof = !strncmp(q, "oneOf at ", 9);
            CHECK_MSG((src == 0) == (relaxed == NULL || only_oneof), "%s: strict %s (%s) but relaxed '%s'", what,
                      src ? "refused" : "compiled", se.msg, relaxed ? relaxed : "");
            if (src) CHECK_MSG(src == ERR_UNSUPPORTED && strchr(se.msg, '/') != NULL,
                               "%s: strict error does not name a pointer: %s", what, se.msg);
        }
        free(sbuf);
        if (g) {
            if (relaxed) {
                n_relaxed++;
                fprintf(stderr, "relaxed %s: %s\n", what, relaxed);
                char *sk = skip_json(relaxed);
                json_t *a = json_loads(sk, 0, NULL);
                for (size_t i = 0; i < json_array_size(a); i++) {
                    const char *k = json_string_value(json_array_get(a, i));
                    json_object_set_new(kw_count, k, json_integer(json_integer_value(json_object_get(kw_count, k)) + 1));
                }
                json_decref(a);
                w->skip = sk;
            } else {
                n_exact++;
                w->skip = "[]";
            }
            int d = 0;
            for (int k = 0; k < walks; k++) d += walk(w, g, sid, what);
            if (walks && !d) {
                n_stuck++;
                fprintf(stderr, "no walk completed: %s\n", what);
            }
            n_done += d;
            n_walks += walks;
            if (relaxed) free((char *)w->skip);
            w->skip = NULL;
            grammar_unref(g);
        }
        free(buf);
        free(relaxed);
        json_decref(doc);
        sid++;
    }
    free(line);
    fclose(f);
    fclose(w->cases);
    w->cases = NULL;
    int nt = MIN(sid, 100000);
    qsort(ms, (size_t)nt, sizeof *ms, cmp_double);
    double sum = 0;
    for (int i = 0; i < nt; i++) sum += ms[i];
    char *kc = json_dumps(kw_count, JSON_COMPACT | JSON_SORT_KEYS);
    printf("corpus: %d schemas, %d enforced exactly, %d relaxed (%.1f%% exact), %d not compiled; relaxed keywords "
           "%s\n",
           sid, n_exact, n_relaxed, sid ? 100.0 * n_exact / sid : 0, n_fail, kc);
    printf("corpus: compile (schema_compile + grammar_from_gbnf) mean %.3f ms, p50 %.3f, p99 %.3f, max %.3f\n",
           nt ? sum / nt : 0, nt ? ms[nt / 2] : 0, nt ? ms[(int)(nt * 0.99)] : 0, nt ? ms[nt - 1] : 0);
    printf("corpus: %d walks (%d completed), %ld cases; %d schemas without a completed walk\n", n_walks, n_done,
           w->n_cases, n_stuck);
    /* random tokens rarely finish a string that must end in a given suffix:
     * a few such schemas are expected, many mean the walker is broken */
    CHECK_MSG(walks == 0 || n_stuck * 20 <= sid, "%d of %d schemas had no completed walk", n_stuck, sid);
    free(kc);
    free(ms);
    json_decref(kw_count);
    return 0;
}

int main(int argc, char **argv) {
    walker w;
    if (!walker_init(&w)) return test_summary("test_schema_walk");
    if (argc == 6 && !strcmp(argv[1], "--walk")) {
        rng_state ^= strtoull(argv[4], NULL, 10) * 0x9E3779B97F4A7C15ull;
        if (!rng_state) rng_state = 1;
        walk_file(&w, argv[2], argv[3], atoi(argv[5]));
    } else if (argc == 6 && !strcmp(argv[1], "--corpus")) {
        rng_state ^= strtoull(argv[4], NULL, 10) * 0x9E3779B97F4A7C15ull;
        if (!rng_state) rng_state = 1;
        corpus_file(&w, argv[2], argv[3], atoi(argv[5]));
    } else {
        for (size_t i = 0; i < ARRAY_LEN(unit_schemas); i++) {
            err_t e = {0};
            int rc;
            grammar *g = compile(unit_schemas[i], &rc, &e);
            CHECK_MSG(g != NULL, "schema %zu: %s", i, e.msg);
            if (!g) continue;
            int n_done = 0;
            for (int k = 0; k < 40; k++) n_done += walk(&w, g, (int)i, unit_schemas[i]);
            CHECK_MSG(n_done > 0, "schema %zu: no walk completed", i);
            grammar_unref(g);
        }
    }
    walker_free(&w);
    return test_summary("test_schema_walk");
}
