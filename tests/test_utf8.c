/* test_utf8.c — base/utf8.h against independent references:
 *   - the well-formed byte sequences of the Unicode standard (chapter 3,
 *     table 3-7, transcribed below as byte ranges), for every 1-, 2- and
 *     3-byte string and every 4-byte string whose last two bytes sit at a
 *     continuation boundary;
 *   - edge cases with the verdict of Python's strict UTF-8 codec
 *     (bytes.decode('utf-8'), CPython 3), recorded when the test was
 *     written: overlong forms, surrogates, above U+10FFFF, stray and
 *     truncated sequences;
 *   - every scalar value encoded and decoded back;
 *   - utf8_count, utf8_char_len and utf8_floor on hand-checked strings. */
#include "base/base.h"
#include "base/utf8.h"
#include "test.h"

/* Table 3-7: each row a well-formed sequence as byte ranges. */
static const struct {
    int len;
    uint8_t lo[4], hi[4];
} wf_rows[] = {
    {1, {0x00}, {0x7F}},
    {2, {0xC2, 0x80}, {0xDF, 0xBF}},
    {3, {0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}},
    {3, {0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}},
    {3, {0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}},
    {3, {0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}},
    {4, {0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}},
    {4, {0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}},
    {4, {0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}},
};

/* utf8_check's contract read off the table: the row's length when s[0..n)
 * starts with a whole row, 0 when it is a proper prefix of one (or n == 0),
 * else -1. */
static int wf_ref(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    for (size_t r = 0; r < ARRAY_LEN(wf_rows); r++) {
        if (s[0] < wf_rows[r].lo[0] || s[0] > wf_rows[r].hi[0]) continue;
        for (int i = 1; i < wf_rows[r].len; i++) {
            if ((size_t)i >= n) return 0;
            if (s[i] < wf_rows[r].lo[i] || s[i] > wf_rows[r].hi[i]) return -1;
        }
        return wf_rows[r].len;
    }
    return -1;
}

/* One string against the table: utf8_check agrees, utf8_decode agrees and
 * its code point encodes back to the same bytes. Returns 1 on a mismatch. */
static int one(const uint8_t *s, size_t n) {
    int want = wf_ref(s, n), got = utf8_check(s, n);
    if (got != want) return 1;
    uint32_t cp = 0xABCDEF;
    int k = utf8_decode(s, n, &cp);
    if (want <= 0) return k != 0 || cp != 0xABCDEF;
    char back[4];
    return k != want || utf8_encode(cp, back) != want || memcmp(back, s, (size_t)want) != 0;
}

int main(void) {
    /* every string of 1, 2 and 3 bytes, and each of its prefixes */
    long bad = 0;
    uint8_t s[4];
    for (int a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        bad += one(s, 1);
        for (int b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            bad += one(s, 2);
            for (int c = 0; c < 256; c++) {
                s[2] = (uint8_t)c;
                bad += one(s, 3);
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* 4 bytes: every first and second byte, the last two at each edge of
     * the continuation range */
    static const uint8_t edge[] = {0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF};
    bad = 0;
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++)
            for (size_t c = 0; c < sizeof edge; c++)
                for (size_t d = 0; d < sizeof edge; d++) {
                    uint8_t t[4] = {(uint8_t)a, (uint8_t)b, edge[c], edge[d]};
                    bad += one(t, 4);
                }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(utf8_check("", 0), 0);
    uint32_t cp = 7;
    CHECK_EQ_INT(utf8_decode("", 0, &cp), 0);

    /* Python's strict codec on whole strings: cp the decoded character, -1
     * an error ("invalid start byte" / "invalid continuation byte"), -2
     * "unexpected end of data" (a well-formed but incomplete start). */
    static const struct {
        const char *s;
        int n;
        long cp;
    } py[] = {
        {"\x00", 1, 0x0},
        {"\x7f", 1, 0x7F},
        {"\xc2\x80", 2, 0x80},
        {"\xdf\xbf", 2, 0x7FF},
        {"\xe0\xa0\x80", 3, 0x800},
        {"\xed\x9f\xbf", 3, 0xD7FF},
        {"\xee\x80\x80", 3, 0xE000},
        {"\xef\xbf\xbf", 3, 0xFFFF},
        {"\xf0\x90\x80\x80", 4, 0x10000},
        {"\xf4\x8f\xbf\xbf", 4, 0x10FFFF},
        {"\xe2\x82\xac", 3, 0x20AC},
        {"\xf0\x9f\x98\x80", 4, 0x1F600},
        {"\xc0\x80", 2, -1},         /* overlong NUL */
        {"\xc1\xbf", 2, -1},         /* overlong */
        {"\xe0\x80\x80", 3, -1},     /* overlong */
        {"\xe0\x9f\xbf", 3, -1},     /* overlong U+07FF */
        {"\xf0\x80\x80\x80", 4, -1}, /* overlong */
        {"\xf0\x8f\xbf\xbf", 4, -1}, /* overlong U+FFFF */
        {"\xed\xa0\x80", 3, -1},     /* surrogate U+D800 */
        {"\xed\xbf\xbf", 3, -1},     /* surrogate U+DFFF */
        {"\xf4\x90\x80\x80", 4, -1}, /* U+110000 */
        {"\xf5\x80\x80\x80", 4, -1}, /* above U+10FFFF */
        {"\xff", 1, -1},
        {"\x80", 1, -1}, /* stray continuation */
        {"\xbf", 1, -1},
        {"\xe2\x28\xa1", 3, -1},
        {"\xc3\x28", 2, -1},
        {"\xe2\x82", 2, -2},     /* truncated */
        {"\xf0\x9f\x98", 3, -2}, /* truncated */
        {"\xc3", 1, -2},         /* truncated */
    };
    for (size_t i = 0; i < ARRAY_LEN(py); i++) {
        int k = utf8_check(py[i].s, (size_t)py[i].n);
        cp = 0xABCDEF;
        int d = utf8_decode(py[i].s, (size_t)py[i].n, &cp);
        if (py[i].cp >= 0) {
            CHECK_MSG(k == py[i].n && d == py[i].n && cp == (uint32_t)py[i].cp, "case %zu: %d %d U+%X", i, k, d, cp);
        } else {
            CHECK_MSG(k == (py[i].cp == -2 ? 0 : -1) && d == 0 && cp == 0xABCDEF, "case %zu: %d %d", i, k, d);
        }
    }

    /* every scalar value round trips; the encoded length follows its range */
    bad = 0;
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        char b[4];
        int n = utf8_encode(c, b), want = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        uint32_t back = 0;
        if (n != want || utf8_decode(b, (size_t)n, &back) != n || back != c) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    char b[4];
    CHECK_EQ_INT(utf8_encode(0x110000, b), 3); /* above the range: U+FFFD */
    CHECK(memcmp(b, "\xef\xbf\xbd", 3) == 0);

    /* counting, character lengths and cutting */
    CHECK_EQ_INT(utf8_count("", 0), 0);
    CHECK_EQ_INT(utf8_count("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10), 4);
    CHECK_EQ_INT(utf8_count("\x80\x80", 2), 0);
    CHECK_EQ_INT(utf8_count("\xe2\x82", 2), 1);
    CHECK_EQ_INT(utf8_char_len("\xe2\x82\xac" "a", 4), 3);
    CHECK_EQ_INT(utf8_char_len("a\x80", 2), 2);
    CHECK_EQ_INT(utf8_char_len("\xe2\x82\xac", 2), 2);
    CHECK_EQ_INT(utf8_floor("abc", 0, 3), 3);
    CHECK_EQ_INT(utf8_floor("a\xe2\x82", 0, 3), 1);
    CHECK_EQ_INT(utf8_floor("a\xe2\x82\xac", 0, 4), 4);
    CHECK_EQ_INT(utf8_floor("\xf0\x9f\x98", 0, 3), 0);
    CHECK_EQ_INT(utf8_floor("x\xf0\x9f\x98\x80", 0, 5), 5);
    CHECK_EQ_INT(utf8_floor("a\xe2\x82", 2, 3), 3); /* the lead is before from */
    CHECK_EQ_INT(utf8_floor("\x80\x80\x80\x80\x80", 0, 5), 5);
    CHECK_EQ_INT(utf8_floor("a\xc3", 0, 2), 1);
    return test_summary("test_utf8");
}
