/*
 * test_grammar.c — the grammar engine (grammar/grammar.h): the GBNF parser's
 * acceptance and rejection table, the matcher on byte strings (accept,
 * can_end, must_end, forced runs, UTF-8 classes, repetition bounds,
 * recursion), and token masks against a brute-force reference on a small
 * synthetic vocabulary and on the real Qwen3 vocabulary, and the masks of
 * the run classes (gmatch.c: RUN_PLAIN ...) bit for bit against whole-trie
 * walks over random walks through format and pattern schemas.
 */
#include <stdlib.h>

#include "grammar/grammar.h"
#include "grammar/schema.h"
#include "tok/hfimport.h"
#include "tok/tok.h"

#include "test.h"

static grammar *compile(const char *src) {
    grammar *g = NULL;
    err_t e = {0};
    int rc = grammar_from_gbnf(src, strlen(src), &g, &e);
    CHECK_MSG(rc == 0, "grammar rejected: %s\n%s", e.msg, src);
    return rc ? NULL : g;
}

/* 2: complete, 1: a valid prefix, 0: refused. */
static int run(grammar *g, const char *s, size_t n) {
    gmatch *m = gmatch_new(g, NULL);
    int r = gmatch_accept_bytes(m, s, n) == 0 ? (gmatch_can_end(m) ? 2 : 1) : 0;
    gmatch_free(m);
    return r;
}

static int match(const char *src, const char *s) {
    grammar *g = compile(src);
    if (!g) return -1;
    int r = run(g, s, strlen(s));
    grammar_unref(g);
    return r;
}

/* ---- parser ---- */

static void test_parse_ok(void) {
    static const char *ok[] = {
        "root ::= \"a\"",
        "root ::= \"\"",
        "root ::= ( \"a\" | \"b\" )* \"c\"",
        "root ::= a b\na ::= \"x\"\nb ::= [0-9]+",
        "# comment\nroot ::= x # trailing\n\nx ::= \"1\" |\n  \"2\"\n",
        "root ::= [^\"\\\\] . [a-zA-Z_\\-]",
        "root ::= \"\\n\\r\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"",
        "root ::= \"a\"{3} \"b\"{0,} \"c\"{1,2} \"d\"?",
        "root ::= \"a\"{ 2 , 5 }",
        "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [0-9] | list",
        "root ::= [α-ω]+ [\\u4e00-\\u9fff]",
        "root ::= ()",
        "root ::= \"a\" | ",
        "root-1 ::= \"a\"\nroot ::= root-1 root_2\nroot_2 ::= \"b\"",
        "root ::= x\nx ::= \"a\" x | \"b\"",
        "root ::= (\"a\" | \"\")* \"b\"",
        "root ::= e* \"x\"\ne ::= \"\" | \"y\"",
        "root ::= []? \"a\"",
        "root ::= [^]",
        "root ::= \"a\"**",
        "root ::= \"a\"\n  *",       /* newlines are whitespace; */
        "root ::= \"a\"\n\"b\"",      /* only `name ::=` starts a rule */
    };
    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        grammar *g = NULL;
        err_t e = {0};
        int rc = grammar_from_gbnf(ok[i], strlen(ok[i]), &g, &e);
        CHECK_MSG(rc == 0 && g, "#%zu rejected: %s", i, e.msg);
        grammar_unref(g);
    }
}

static void test_parse_errors(void) {
    static const struct {
        const char *src;
        int code;
        const char *msg; /* a substring, with line:col */
    } bad[] = {
        {"", ERR_FORMAT, "missing rule 'root'"},
        {"foo ::= \"a\"", ERR_FORMAT, "1:12: missing rule 'root'"},
        {"root ::= value", ERR_FORMAT, "1:10: undefined rule 'value'"},
        {"root ::= \"a\"\nroot ::= \"b\"", ERR_FORMAT, "2:1: rule 'root' defined twice (first at 1:1)"},
        {"root ::= root \"a\"", ERR_FORMAT, "1:1: left recursion: rule 'root'"},
        {"root ::= a\na ::= b \"x\"\nb ::= a | \"y\"", ERR_FORMAT, "left recursion"},
        {"root ::= e a\na ::= e root\ne ::= \"\"", ERR_FORMAT, "left recursion"},
        {"root ::= \"a\" root", ERR_FORMAT, "1:1: rule 'root' can never match"},
        {"root ::= \"abc", ERR_FORMAT, "1:10: unterminated string literal"},
        {"root ::= [abc", ERR_FORMAT, "1:10: unterminated character class"},
        {"root ::= (\"a\"", ERR_FORMAT, "1:10: unclosed '('"},
        {"root ::= \"a\")", ERR_FORMAT, "1:13: unexpected ')'"},
        {"root ::= * \"a\"", ERR_FORMAT, "1:10: '*' without an item"},
        {"root ::= [z-a]", ERR_FORMAT, "1:11: range end"},
        {"root ::= \"\\q\"", ERR_FORMAT, "1:11: unknown escape '\\q'"},
        {"root ::= \"\\x4\"", ERR_FORMAT, "needs 2 hex digits"},
        {"root ::= \"\\U00110000\"", ERR_FORMAT, "past U+10FFFF"},
        {"root ::= \"a\"{3,2}", ERR_FORMAT, "1:13: repetition {3,2}"},
        {"root ::= \"a\"{10001}", ERR_RANGE, "1:14: repetition count exceeds 10000"},
        {"root ::= \"a\"{,3}", ERR_FORMAT, "expected a number"},
        {"root ::= \"a\"{2", ERR_FORMAT, "expected '}'"},
        {"root := \"a\"", ERR_FORMAT, "1:1: expected a rule definition"},
        {"root ::= a!", ERR_FORMAT, "1:11: unexpected '!'"},
        {"root ::= [\xff]", ERR_FORMAT, "1:11: invalid UTF-8"},
        {"root ::= x\nx ::= [^\\x00-\\U0010FFFF]", ERR_FORMAT, "2:1: rule 'x' can never match"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        grammar *g = NULL;
        err_t e = {0};
        int rc = grammar_from_gbnf(bad[i].src, strlen(bad[i].src), &g, &e);
        CHECK_MSG(rc == bad[i].code && !g, "#%zu: rc %d (%s) for %s", i, rc, e.msg, bad[i].src);
        if (bad[i].msg) CHECK_MSG(strstr(e.msg, bad[i].msg) != NULL, "#%zu: message \"%s\", want \"%s\"", i, e.msg, bad[i].msg);
        /* every message starts with line:col */
        unsigned l, c;
        CHECK_MSG(sscanf(e.msg, "%u:%u:", &l, &c) == 2, "#%zu: no line:col in \"%s\"", i, e.msg);
        grammar_unref(g);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[2000];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 600; i++) deep[n++] = '(';
    deep[n] = 0;
    grammar *g = NULL;
    err_t e = {0};
    CHECK_EQ_INT(grammar_from_gbnf(deep, n, &g, &e), ERR_RANGE);
    /* the size limit */
    size_t big = GRAMMAR_MAX_SRC_BYTES + 1;
    char *s = malloc(big);
    memset(s, ' ', big);
    CHECK_EQ_INT(grammar_from_gbnf(s, big, &g, &e), ERR_RANGE);
    free(s);
    /* a NUL byte inside the text is just an unexpected byte */
    CHECK_EQ_INT(grammar_from_gbnf("root ::= \"a\"\0", 13, &g, &e), ERR_FORMAT);
}

/* ---- matcher on bytes ---- */

static void test_match_basic(void) {
    const char *num = "root ::= \"-\"? [0-9]+ (\".\" [0-9]+)?";
    CHECK_EQ_INT(match(num, "12"), 2);
    CHECK_EQ_INT(match(num, "-1.5"), 2);
    CHECK_EQ_INT(match(num, "-"), 1);
    CHECK_EQ_INT(match(num, "1."), 1);
    CHECK_EQ_INT(match(num, "1.x"), 0);
    CHECK_EQ_INT(match(num, "1..2"), 0);
    CHECK_EQ_INT(match(num, ""), 1);
    const char *alt = "root ::= \"ab\" | \"ac\" | \"abd\"";
    CHECK_EQ_INT(match(alt, "ab"), 2);
    CHECK_EQ_INT(match(alt, "abd"), 2);
    CHECK_EQ_INT(match(alt, "a"), 1);
    CHECK_EQ_INT(match(alt, "ad"), 0);
    CHECK_EQ_INT(match("root ::= \"\"", ""), 2);
    CHECK_EQ_INT(match("root ::= \"\"", "a"), 0);
    CHECK_EQ_INT(match("root ::= (\"a\" | \"\")* \"b\"", "aaab"), 2);
    CHECK_EQ_INT(match("root ::= e* \"x\"\ne ::= \"\" | \"y\"", "yyx"), 2);
    CHECK_EQ_INT(match("root ::= []? \"a\"", "a"), 2);
    CHECK_EQ_INT(match("root ::= \"a\" [] | \"ab\"", "a"), 1);
    CHECK_EQ_INT(match("root ::= \"a\" [] | \"ab\"", "ab"), 2);
    /* escapes are code points: \xE9 is é (two bytes) */
    CHECK_EQ_INT(match("root ::= \"\\xe9\\n\\t\\\"\"", "\xc3\xa9\n\t\""), 2);
    CHECK_EQ_INT(match("root ::= \"\\U0001F600\"", "\xf0\x9f\x98\x80"), 2);
    /* multi-line alternatives and comments */
    CHECK_EQ_INT(match("root ::= \"x\"  # c\n  | \"y\" # d\nz ::= \"q\"", "y"), 2);
}

static void test_match_utf8(void) {
    const char *greek = "root ::= [α-ω]+";
    CHECK_EQ_INT(match(greek, "αβγ"), 2);
    CHECK_EQ_INT(match(greek, "\xce"), 1); /* half of a character */
    CHECK_EQ_INT(match(greek, "a"), 0);
    CHECK_EQ_INT(match(greek, "\xce\x91"), 0); /* Α, capital */
    const char *notq = "root ::= [^\"\\\\]*";
    CHECK_EQ_INT(match(notq, "héllo 😀 \x7f"), 2);
    CHECK_EQ_INT(match(notq, "a\"b"), 0);
    CHECK_EQ_INT(match(notq, "\xff"), 0);          /* never valid UTF-8 */
    CHECK_EQ_INT(match(notq, "\xc0\x80"), 0);      /* overlong */
    CHECK_EQ_INT(match(notq, "\xed\xa0\x80"), 0);  /* surrogate */
    CHECK_EQ_INT(match(notq, "\xf4\x90\x80\x80"), 0); /* past U+10FFFF */
    CHECK_EQ_INT(match(notq, "\xe0\x9f"), 0);      /* overlong 3-byte */
    CHECK_EQ_INT(match(notq, "\xf4\x8f\xbf\xbf"), 2);
    const char *any = "root ::= . .";
    CHECK_EQ_INT(match(any, "a\xe4\xb8\xad"), 2);
    CHECK_EQ_INT(match(any, "\n\x01"), 2);
    CHECK_EQ_INT(match(any, "abc"), 0);
    /* every code point of a mixed class, checked against a direct test */
    grammar *g = compile("root ::= [a-z\\u00e0-\\u00ff\\u0800-\\u0fff\\U00010000-\\U00010400\\ue000]");
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x11000 && g; cp += (cp < 0x1100 ? 1 : 7)) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint8_t b[4];
        int n;
        if (cp < 0x80) b[0] = (uint8_t)cp, n = 1;
        else if (cp < 0x800) b[0] = (uint8_t)(0xC0 | cp >> 6), b[1] = (uint8_t)(0x80 | (cp & 63)), n = 2;
        else if (cp < 0x10000)
            b[0] = (uint8_t)(0xE0 | cp >> 12), b[1] = (uint8_t)(0x80 | (cp >> 6 & 63)), b[2] = (uint8_t)(0x80 | (cp & 63)), n = 3;
        else
            b[0] = (uint8_t)(0xF0 | cp >> 18), b[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
            b[2] = (uint8_t)(0x80 | (cp >> 6 & 63)), b[3] = (uint8_t)(0x80 | (cp & 63)), n = 4;
        bool want = (cp >= 'a' && cp <= 'z') || (cp >= 0xE0 && cp <= 0xFF) || (cp >= 0x800 && cp <= 0xFFF) ||
                    (cp >= 0x10000 && cp <= 0x10400) || cp == 0xE000;
        if ((run(g, (const char *)b, (size_t)n) == 2) != want) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    grammar_unref(g);
}

static void test_repetition(void) {
    const char *r = "root ::= \"a\"{2,4} \"b\"";
    CHECK_EQ_INT(match(r, "ab"), 0);
    CHECK_EQ_INT(match(r, "aab"), 2);
    CHECK_EQ_INT(match(r, "aaaab"), 2);
    CHECK_EQ_INT(match(r, "aaaaa"), 0);
    CHECK_EQ_INT(match("root ::= \"a\"{3}", "aaa"), 2);
    CHECK_EQ_INT(match("root ::= \"a\"{3}", "aa"), 1);
    CHECK_EQ_INT(match("root ::= \"a\"{3}", "aaaa"), 0);
    CHECK_EQ_INT(match("root ::= \"a\"{2,}", "a"), 1);
    CHECK_EQ_INT(match("root ::= \"a\"{2,}", "aaaaaaa"), 2);
    CHECK_EQ_INT(match("root ::= \"a\"{0}", ""), 2);
    CHECK_EQ_INT(match("root ::= \"a\"{0}", "a"), 0);
    CHECK_EQ_INT(match("root ::= (\"ab\" | \"c\"){1,3}", "abcab"), 2);
    CHECK_EQ_INT(match("root ::= (\"ab\" | \"c\"){1,3}", "abcabc"), 0);
    CHECK_EQ_INT(match("root ::= (\"x\"{2}){2}", "xxxx"), 2);
    CHECK_EQ_INT(match("root ::= (\"x\"{2}){2}", "xxx"), 1);
    /* large bounds stay linear in size and exact */
    grammar *g = compile("root ::= [a-z]{0,10000} \".\"");
    if (g) {
        CHECK_MSG(grammar_n_states(g) < 50000, "%d states", grammar_n_states(g));
        char *s = malloc(10002);
        memset(s, 'q', 10001);
        s[10000] = '.';
        CHECK_EQ_INT(run(g, s, 10001), 2);
        s[10000] = 'q';
        s[10001] = '.';
        CHECK_EQ_INT(run(g, s, 10002), 0);
        free(s);
        grammar_unref(g);
    }
    g = compile("root ::= (\"{\" [0-9a-f]{8} (\",\" [a-z]+)? \"}\"){500,10000}");
    if (g) {
        CHECK_MSG(grammar_n_states(g) < 100000, "%d states", grammar_n_states(g));
        size_t cap = 600 * 16, n = 0;
        char *s = malloc(cap);
        for (int i = 0; i < 499; i++) n += (size_t)sprintf(s + n, "{0123abcd,xy}");
        CHECK_EQ_INT(run(g, s, n), 1);
        n += (size_t)sprintf(s + n, "{ffffffff}");
        CHECK_EQ_INT(run(g, s, n), 2);
        free(s);
        grammar_unref(g);
    }
    /* nested big repetitions: still linear (each level is a lifted rule) */
    g = compile("root ::= ((\"ab\"{1,10000}){1,10000}){1,10000}");
    if (g) {
        CHECK_MSG(grammar_n_states(g) < 200000, "%d states", grammar_n_states(g));
        CHECK_EQ_INT(run(g, "abababab", 8), 2);
        CHECK_EQ_INT(run(g, "aba", 3), 1);
        grammar_unref(g);
    }
}

static void test_recursion(void) {
    const char *br = "root ::= item\nitem ::= \"[\" (item (\",\" item)*)? \"]\" | [0-9]";
    CHECK_EQ_INT(match(br, "[1,[2,[]],3]"), 2);
    CHECK_EQ_INT(match(br, "[1,[2,[]],3"), 1);
    CHECK_EQ_INT(match(br, "[1,[2,[]]],3]"), 0);
    CHECK_EQ_INT(match(br, "[[]]]"), 0);
    grammar *g = compile(br);
    if (g) {
        int depth = 3000;
        char *s = malloc((size_t)depth * 2 + 1);
        for (int i = 0; i < depth; i++) s[i] = '[', s[depth + i] = ']';
        CHECK_EQ_INT(run(g, s, (size_t)depth * 2), 2);
        CHECK_EQ_INT(run(g, s, (size_t)depth * 2 - 1), 1);
        free(s);
        grammar_unref(g);
    }
    /* right recursion runs as tail calls: no stack growth, so long inputs
     * are cheap */
    g = compile("root ::= list\nlist ::= [a-z] (\",\" list)?");
    if (g) {
        size_t n = 200001;
        char *s = malloc(n);
        for (size_t i = 0; i < n; i++) s[i] = i % 2 ? ',' : 'x';
        CHECK_EQ_INT(run(g, s, n), 2);
        grammar_stats st;
        grammar_cache_stats(g, &st);
        CHECK_MSG(st.n_stacks < 100, "%zu stacks", st.n_stacks);
        free(s);
        grammar_unref(g);
    }
}

static void test_end_and_forced(void) {
    grammar *g = compile("root ::= \"{\\\"name\\\": \" (\"\\\"bob\\\"\" | \"\\\"bill\\\"\") \"}\"");
    if (!g) return;
    gmatch *m = gmatch_new(g, NULL);
    char buf[64];
    int n = gmatch_forced(m, buf, sizeof buf);
    CHECK_EQ_INT(n, 11);
    CHECK(n == 11 && memcmp(buf, "{\"name\": \"b", 11) == 0);
    CHECK_EQ_INT(gmatch_forced(m, buf, 4), 4); /* capped */
    CHECK_EQ_INT(gmatch_accept_bytes(m, buf, 4), 0);
    CHECK_EQ_INT(gmatch_accept_bytes(m, "X", 1), ERR_INVALID);
    CHECK_EQ_INT(gmatch_accept_bytes(m, "me\": \"bi", 8), 0);
    n = gmatch_forced(m, buf, sizeof buf);
    CHECK(n == 4 && memcmp(buf, "ll\"}", 4) == 0);
    CHECK(!gmatch_can_end(m));
    gmatch *c = gmatch_clone(m);
    CHECK_EQ_INT(gmatch_accept_bytes(c, "ll\"}", 4), 0);
    CHECK(gmatch_can_end(c) && gmatch_must_end(c));
    CHECK_EQ_INT(gmatch_forced(c, buf, sizeof buf), 0);
    CHECK(!gmatch_can_end(m)); /* the original did not move */
    gmatch_free(c);
    gmatch_free(m);
    grammar_unref(g);
    /* forced stops where the output could end */
    g = compile("root ::= \"ab\" \"c\"?");
    m = gmatch_new(g, NULL);
    CHECK_EQ_INT(gmatch_forced(m, buf, sizeof buf), 2);
    gmatch_accept_bytes(m, "ab", 2);
    CHECK(gmatch_can_end(m) && !gmatch_must_end(m));
    CHECK_EQ_INT(gmatch_forced(m, buf, sizeof buf), 0);
    gmatch_free(m);
    grammar_unref(g);
    /* forced through a multi-byte character and through rule calls */
    g = compile("root ::= a \"é\" b\na ::= \"x\"\nb ::= \"y\" [0-9]");
    m = gmatch_new(g, NULL);
    n = gmatch_forced(m, buf, sizeof buf);
    CHECK(n == 4 && memcmp(buf, "x\xc3\xa9y", 4) == 0);
    gmatch_free(m);
    grammar_unref(g);
}

/* ---- masks ---- */

typedef struct svocab {
    const char **pieces;
    int n;
} svocab;

static int spiece(void *ctx, int32_t id, char *buf, int cap) {
    const svocab *v = ctx;
    if (id < 0 || id >= v->n || !v->pieces[id]) return -1;
    int n = (int)strlen(v->pieces[id]);
    memcpy(buf, v->pieces[id], (size_t)MIN(n, cap));
    return n;
}

/* Compares gmatch_mask with accepting each token on a clone; returns the
 * number of disagreements. */
static int check_mask(gmatch *m, int n_vocab, const char *what) {
    size_t words = ((size_t)n_vocab + 63) / 64;
    uint64_t *mask = calloc(words, 8);
    int count = gmatch_mask(m, mask), bad = 0, n_set = 0;
    for (int id = 0; id < n_vocab; id++) {
        bool in = mask[id >> 6] >> (id & 63) & 1;
        gmatch *c = gmatch_clone(m);
        bool ok = gmatch_accept(c, id) == 0;
        gmatch_free(c);
        n_set += in;
        if (in != ok && bad++ < 5) fprintf(stderr, "%s: token %d: mask %d, accept %d\n", what, id, in, ok);
    }
    CHECK_EQ_INT(count, n_set);
    /* a second call is served from the cache and is the same */
    uint64_t *again = calloc(words, 8);
    CHECK_EQ_INT(gmatch_mask(m, again), count);
    CHECK(memcmp(mask, again, words * 8) == 0);
    free(again);
    free(mask);
    return bad;
}

static void test_mask_synthetic(void) {
    const char *pieces[] = {"a", "b", "ab", "abc", "\"", "\",", "1", "12", "1.", ".5", "}", "", NULL, "<eos>",
                            "x", "{\"", "{\"k", "\xc3", "\xa9", "\xc3\xa9", "\"}", "ab", "\xe2\x82", "<ctl>"};
    int n = (int)ARRAY_LEN(pieces);
    uint8_t kind[ARRAY_LEN(pieces)] = {0};
    kind[13] = GV_EOG;
    kind[23] = GV_NEVER;
    svocab sv = {pieces, n};
    gvocab *v = gvocab_new(n, spiece, &sv, kind);
    CHECK_EQ_INT(gvocab_n_vocab(v), n);
    grammar *g = compile("root ::= \"{\\\"k\\\": \" (num | str) \"}\"\nnum ::= [0-9]+ (\".\" [0-9]+)?\n"
                         "str ::= \"\\\"\" [^\"]* \"\\\"\"");
    if (g) {
        gmatch *m = gmatch_new(g, v);
        CHECK_EQ_INT(check_mask(m, n, "start"), 0);
        CHECK_EQ_INT(gmatch_accept(m, 16), 0); /* {"k */
        CHECK_EQ_INT(gmatch_accept(m, 14), ERR_INVALID);
        CHECK_EQ_INT(gmatch_accept_bytes(m, "\": ", 3), 0);
        CHECK_EQ_INT(check_mask(m, n, "value"), 0);
        gmatch *s = gmatch_clone(m);
        CHECK_EQ_INT(gmatch_accept(s, 4), 0); /* " */
        CHECK_EQ_INT(check_mask(s, n, "in string"), 0);
        CHECK_EQ_INT(gmatch_accept(s, 17), 0); /* half of é */
        CHECK_EQ_INT(check_mask(s, n, "mid character"), 0);
        CHECK_EQ_INT(gmatch_accept(s, 18), 0);
        CHECK_EQ_INT(gmatch_accept(s, 20), 0); /* "} */
        CHECK(gmatch_can_end(s) && gmatch_must_end(s));
        CHECK_EQ_INT(check_mask(s, n, "end"), 0);
        uint64_t mask[1] = {0};
        CHECK_EQ_INT(gmatch_mask(s, mask), 1);
        CHECK_EQ_INT(mask[0], 1ull << 13);
        CHECK_EQ_INT(gmatch_accept(s, 11), ERR_INVALID); /* empty piece: never */
        CHECK_EQ_INT(gmatch_accept(s, 13), 0);
        CHECK_EQ_INT(gmatch_mask(s, mask), 0);
        CHECK_EQ_INT(gmatch_accept(s, 13), ERR_INVALID);
        gmatch_free(s);
        CHECK_EQ_INT(gmatch_accept(m, 7), 0); /* 12 */
        CHECK_EQ_INT(check_mask(m, n, "number"), 0);
        CHECK_EQ_INT(gmatch_accept(m, 23), ERR_INVALID);
        CHECK_EQ_INT(gmatch_accept(m, -1), ERR_INVALID);
        CHECK_EQ_INT(gmatch_accept(m, n), ERR_INVALID);
        gmatch_free(m);
        /* a tiny cache budget: masks are evicted, the DFA is rebuilt, results hold */
        grammar_set_cache_bytes(g, 0);
        m = gmatch_new(g, v);
        const char *steps[] = {"{\"k\": ", "\"", "x", "ab", "\""};
        for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
            CHECK_EQ_INT(gmatch_accept_bytes(m, steps[i], strlen(steps[i])), 0);
            CHECK_EQ_INT(check_mask(m, n, steps[i]), 0);
        }
        gmatch_free(m);
        grammar_unref(g);
    }
    gvocab_free(v);
}

static int qpiece(void *ctx, int32_t id, char *buf, int cap) { return tok_piece(ctx, id, buf, cap); }

static const char *json_gbnf =
    "root ::= \"{\\\"name\\\": \" str \", \\\"args\\\": \" args \"}\"\n"
    "args ::= \"{\\\"city\\\": \" str \", \\\"days\\\": \" int (\", \\\"tags\\\": \" tags)? \", \\\"deep\\\": \" value \"}\"\n"
    "tags ::= \"[\" (str (\", \" str){0,4})? \"]\"\n"
    "int ::= \"-\"? ([0-9] | [1-9] [0-9]{1,8})\n"
    "str ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\"\n"
    "value ::= str | int (\".\" [0-9]+)? | \"true\" | \"false\" | \"null\" | obj | arr\n"
    "obj ::= \"{\" (str \": \" value (\", \" str \": \" value)*)? \"}\"\n"
    "arr ::= \"[\" (value (\", \" value)*)? \"]\"\n";

static gvocab *qwen3_vocab(tokenizer *t) {
    int n = tok_n_vocab(t);
    uint8_t *kind = malloc((size_t)n);
    for (int i = 0; i < n; i++)
        kind[i] = tok_is_eog(t, i) ? GV_EOG : tok_type(t, i) == TOK_TYPE_CONTROL ? GV_NEVER : GV_NORMAL;
    int64_t t0 = clock_ns();
    gvocab *v = gvocab_new(n, qpiece, t, kind);
    printf("gvocab_new: %d tokens in %.1f ms%s\n", n, (double)(clock_ns() - t0) / 1e6,
           getenv("KVLOOM_NO_RUN_MASKS") ? " (no run classes)" : "");
    free(kind);
    return v;
}

static void test_mask_qwen3(tokenizer *t, gvocab *v) {
    int n = tok_n_vocab(t);
    grammar *g = compile(json_gbnf);
    if (g) {
        gmatch *m = gmatch_new(g, v);
        CHECK_EQ_INT(check_mask(m, n, "start"), 0);
        /* walk a document, checking the mask at a few states */
        const char *doc =
            "{\"name\": \"weather\\u00e9 \xe2\x82\xac\", \"args\": {\"city\": \"Paris\", \"days\": 12, "
            "\"deep\": {\"a\": [1.5, true, {\"b\": null}], \"c\": \"x\"}}}";
        static const int check_at[] = {10, 20, 21, 22, 48, 62, 70, 80, 100, 114, 116};
        size_t len = strlen(doc), pos = 0;
        for (size_t k = 0; k < ARRAY_LEN(check_at) && m; k++) {
            size_t to = (size_t)check_at[k];
            if (to > len) break;
            CHECK_EQ_INT(gmatch_accept_bytes(m, doc + pos, to - pos), 0);
            pos = to;
            char what[32];
            snprintf(what, sizeof what, "at %zu", pos);
            CHECK_EQ_INT(check_mask(m, n, what), 0);
        }
        CHECK_EQ_INT(gmatch_accept_bytes(m, doc + pos, len - pos), 0);
        CHECK(gmatch_can_end(m) && gmatch_must_end(m));
        CHECK_EQ_INT(check_mask(m, n, "end"), 0);
        gmatch_free(m);
        /* tokenize the document as a model would write it: every token must
         * be in the mask */
        int32_t ids[512];
        int n_ids = tok_encode(t, doc, len, false, false, ids, 512);
        m = gmatch_new(g, v);
        uint64_t *mask = malloc(((size_t)n + 63) / 64 * 8);
        int64_t *dt = malloc(sizeof(int64_t) * (size_t)(n_ids + 1));
        int refused = 0;
        for (int i = 0; i < n_ids && i < 512; i++) {
            int64_t a = clock_ns();
            gmatch_mask(m, mask);
            dt[i] = clock_ns() - a;
            if (!(mask[ids[i] >> 6] >> (ids[i] & 63) & 1)) refused++;
            if (gmatch_accept(m, ids[i])) refused++;
        }
        CHECK_EQ_INT(refused, 0);
        gmatch_mask(m, mask);
        int32_t eos = -1;
        for (int i = 0; i < n; i++)
            if (tok_is_eog(t, i)) {
                eos = i;
                break;
            }
        CHECK(eos >= 0 && (mask[eos >> 6] >> (eos & 63) & 1));
        CHECK_EQ_INT(gmatch_accept(m, eos), 0);
        int64_t sum = 0;
        for (int i = 0; i < n_ids; i++) sum += dt[i];
        printf("document of %d tokens: %.1f us per mask on average (first pass, cold cache)\n", n_ids,
               (double)sum / 1e3 / MAX(n_ids, 1));
        grammar_stats st;
        grammar_cache_stats(g, &st);
        printf("cache: %zu stacks, %zu sets, %zu masks, %.1f MiB, %llu hits, %llu misses\n", st.n_stacks, st.n_sets,
               st.n_masks, (double)st.cache_bytes / (1 << 20), (unsigned long long)st.mask_hits,
               (unsigned long long)st.mask_misses);
        free(dt);
        free(mask);
        gmatch_free(m);
        grammar_unref(g);
    }
}

/* Schemas whose strings are runs of a class with exceptions: the bounded
 * counts of formats, a pattern's `.`, keys that must not be a listed name,
 * classes that refuse part of a run class, hex and digits. */
static const char *run_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"abc\":{\"type\":\"integer\"}},"
    "\"required\":[\"a\"],\"additionalProperties\":{\"type\":\"string\",\"maxLength\":12}}",
    "{\"type\":\"string\",\"format\":\"email\"}",
    "{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"^(?:[A-Za-z0-9_'+\\\\-]+\\\\.)*[A-Za-z0-9_'+\\\\-]*[A-Za-z0-9_+-]@"
    "(?:[A-Za-z0-9][A-Za-z0-9\\\\-]*\\\\.)+[A-Za-z]{2,}$\"}",
    "{\"type\":\"string\",\"format\":\"hostname\",\"pattern\":\"^(?=.{1,253}\\\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    "(?:\\\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]{0,61}[0-9a-zA-Z])?)*\\\\.?$\"}",
    "{\"type\":\"string\",\"format\":\"uri\"}",
    "{\"type\":\"string\",\"pattern\":\".*\\\\.json$\"}",
    "{\"type\":\"string\",\"pattern\":\"^[^a-z]*$\"}",
    "{\"type\":\"string\",\"pattern\":\"^sk-.{0,20}$\"}",
    "{\"type\":\"string\",\"pattern\":\"^[0-9a-f]{8,40}$\"}",
    "{\"type\":\"string\",\"pattern\":\"^[A-Za-z0-9_-]{21}$\"}",
    "{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"string\",\"format\":\"date-time\"}}",
    "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"minimum\":-5,\"maximum\":1000},"
    "\"e\":{\"enum\":[\"alpha\",\"beta\",\"x-ray\"]},\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":30},"
    "\"u\":{\"type\":\"string\",\"format\":\"uuid\"}},\"required\":[\"n\",\"e\",\"s\",\"u\"]}",
};

/* The run classes against whole-trie walks: every schema compiled twice
 * (each grammar keeps its own mask cache), random walks taking a random
 * allowed token, the masks of the vocabulary with run classes (fast) and
 * without (slow, KVLOOM_NO_RUN_MASKS=1) equal bit for bit at every step. */
static void test_mask_runs(tokenizer *t, gvocab *fast) {
    setenv("KVLOOM_NO_RUN_MASKS", "1", 1);
    gvocab *slow = qwen3_vocab(t);
    unsetenv("KVLOOM_NO_RUN_MASKS");
    int n = tok_n_vocab(t);
    size_t words = ((size_t)n + 63) / 64;
    uint64_t *ma = malloc(words * 8), *mb = malloc(words * 8);
    int32_t *allowed = malloc((size_t)n * sizeof *allowed);
    uint64_t rs = 0x9E3779B97F4A7C15ull, n_masks = 0, n_runs = 0, n_irregular = 0;
    int bad = 0;
    for (size_t i = 0; i < ARRAY_LEN(run_schemas); i++) {
        json_t *js = json_loads(run_schemas[i], 0, NULL);
        char *gbnf = NULL;
        size_t len = 0;
        err_t e = {0};
        int rc = js ? schema_compile(js, "root", true, NULL, &gbnf, &len, &e) : -1;
        CHECK_MSG(rc == 0, "schema %zu: %s", i, e.msg);
        grammar *ga = NULL, *gb = NULL;
        if (rc == 0 && grammar_from_gbnf(gbnf, len, &ga, &e) == 0 && grammar_from_gbnf(gbnf, len, &gb, &e) == 0) {
            for (int w = 0; w < 3; w++) {
                gmatch *a = gmatch_new(ga, fast), *b = gmatch_new(gb, slow);
                for (int step = 0; step < 40 && !gmatch_must_end(a); step++) {
                    int ca = gmatch_mask(a, ma), cb = gmatch_mask(b, mb);
                    n_masks++;
                    if ((ca != cb || memcmp(ma, mb, words * 8)) && bad++ < 5) {
                        for (int id = 0; id < n; id++)
                            if ((ma[id >> 6] ^ mb[id >> 6]) >> (id & 63) & 1) {
                                char p[64];
                                int pl = tok_piece(t, id, p, sizeof p);
                                fprintf(stderr, "schema %zu walk %d step %d: token %d '%.*s' fast %d slow %d\n", i, w,
                                        step, id, pl > 0 ? MIN(pl, 60) : 0, p, (int)(ma[id >> 6] >> (id & 63) & 1),
                                        (int)(mb[id >> 6] >> (id & 63) & 1));
                                break;
                            }
                    }
                    int k = 0;
                    for (size_t x = 0; x < words; x++)
                        for (uint64_t bits = ma[x]; bits; bits &= bits - 1)
                            allowed[k++] = (int32_t)(x * 64 + (size_t)__builtin_ctzll(bits));
                    if (!k) break;
                    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
                    int32_t tok = allowed[rs % (uint64_t)k];
                    if (gmatch_accept(a, tok) || gmatch_accept(b, tok)) break;
                }
                gmatch_free(a);
                gmatch_free(b);
            }
            grammar_stats st;
            grammar_cache_stats(ga, &st);
            n_runs += st.mask_runs, n_irregular += st.mask_exceptions;
        }
        grammar_unref(ga);
        grammar_unref(gb);
        free(gbnf);
        json_decref(js);
    }
    CHECK_EQ_INT(bad, 0);
    /* both ways of the run classes were taken */
    CHECK(n_runs > 0 && n_irregular > 0);
    printf("run classes: %llu masks compared, %llu misses by runs, %llu of them with exceptions\n",
           (unsigned long long)n_masks, (unsigned long long)n_runs, (unsigned long long)n_irregular);
    free(ma), free(mb), free(allowed);
    gvocab_free(slow);
}

/* Issue 26 finding 10: more alternatives at one position than one step can
 * follow (GM_MAX_SET, 4096) are refused when the grammar compiles, with the
 * limit named; before, such a grammar compiled and the request failed in
 * the middle of its output ("no token can be sampled"). 4000 compile and
 * match their last alternative. */
static char *many_alternatives(int n, bool at_start) {
    size_t cap = (size_t)n * 16 + 64, k = 0;
    char *s = xmalloc(cap);
    k += (size_t)snprintf(s + k, cap - k, at_start ? "root ::= alt\nalt ::= " : "root ::= \"{\" alt \"}\"\nalt ::= ");
    for (int i = 0; i < n; i++) k += (size_t)snprintf(s + k, cap - k, "%s\"v%d\"", i ? " | " : "", i);
    return s;
}

static void test_alternatives_limit(void) {
    for (int at_start = 0; at_start < 2; at_start++) {
        char *src = many_alternatives(5000, at_start);
        grammar *g = NULL;
        err_t e = {0};
        CHECK_EQ_INT(grammar_from_gbnf(src, strlen(src), &g, &e), ERR_RANGE);
        CHECK_MSG(strstr(e.msg, "more than 4096 alternatives at one position"), "%s", e.msg);
        free(src);
        src = many_alternatives(4000, at_start);
        CHECK_MSG(grammar_from_gbnf(src, strlen(src), &g, &e) == 0, "%s", e.msg);
        grammar_unref(g);
        CHECK_EQ_INT(match(src, at_start ? "v3999" : "{v3999}"), 2);
        free(src);
    }
}

int main(void) {
    log_level = LOG_ERROR;
    test_alternatives_limit();
    test_parse_ok();
    test_parse_errors();
    test_match_basic();
    test_match_utf8();
    test_repetition();
    test_recursion();
    test_end_and_forced();
    test_mask_synthetic();
    tokenizer *t = test_load_hf_tokenizer("qwen3", "tokenizer_config.json");
    if (t) {
        gvocab *v = qwen3_vocab(t);
        test_mask_qwen3(t, v);
        test_mask_runs(t, v);
        gvocab_free(v);
        tok_free(t);
    }
    return test_summary("test_grammar");
}
