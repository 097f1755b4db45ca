/*
 * utf8.h — UTF-8: the one decoder, validator and encoder of the program.
 *
 * Place in the flow: base/ (includes nothing from kvloom). Tokenizers,
 * grammars, templates, the GGUF reader and the server all read UTF-8 from
 * untrusted bytes through these functions.
 *
 * Strict means the well-formed sequences of the Unicode standard (chapter 3,
 * table 3-7): no overlong forms (C0, C1, E0 80..9F, F0 80..8F), no
 * surrogates (ED A0..BF), nothing above U+10FFFF (F4 90.., F5..FF), no stray
 * continuation bytes. tests/test_utf8.c checks every 1-, 2- and 3-byte
 * sequence and the 4-byte ones at each boundary against that table.
 *
 * The check and the decoder are inline: the pre-tokenizer and the grammar
 * matcher call them per code point. Thread safety: pure functions.
 */
#ifndef KVLOOM_UTF8_H
#define KVLOOM_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length of a sequence that lead byte b starts: 1 for ASCII, 2 to 4 for
 * a byte that may lead one (C2..F4), 0 for a byte that cannot (80..C1,
 * F5..FF). */
static inline int utf8_lead_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0; /* a continuation byte or an overlong 2-byte lead */
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

/* Looks at the start of s[0..n): L > 0 when s[0..L) is one complete
 * well-formed character; 0 when n == 0 or s[0..n) is a well-formed but
 * incomplete start of one (more bytes may complete it: the streaming
 * detokenizer waits for them); -1 when s cannot start one given what
 * follows. */
static inline int utf8_check(const void *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    if (n == 0) return 0;
    int len = utf8_lead_len(p[0]);
    if (len <= 1) return len ? 1 : -1;
    /* the second byte's range rules out the overlong 3- and 4-byte forms,
     * the surrogates and the values above U+10FFFF */
    uint8_t lo = 0x80, hi = 0xBF;
    if (p[0] == 0xE0) lo = 0xA0;
    else if (p[0] == 0xED) hi = 0x9F;
    else if (p[0] == 0xF0) lo = 0x90;
    else if (p[0] == 0xF4) hi = 0x8F;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        if (p[i] < lo || p[i] > hi) return -1;
        lo = 0x80, hi = 0xBF;
    }
    return len;
}

/* Decodes the well-formed character at the start of s[0..n): its length
 * (1..4) with its code point in *cp, or 0 (cp untouched) when there is none
 * (n == 0, an incomplete or an ill-formed sequence). */
static inline int utf8_decode(const void *s, size_t n, uint32_t *cp) {
    const uint8_t *p = (const uint8_t *)s;
    int len = utf8_check(p, n);
    switch (len) {
    case 1: *cp = p[0]; break;
    case 2: *cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F); break;
    case 3: *cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F); break;
    case 4:
        *cp = ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
              (p[3] & 0x3F);
        break;
    default: return 0;
    }
    return len;
}

/* Writes the UTF-8 of code point cp to out (4 bytes of room) and returns its
 * length; a cp above U+10FFFF is written as U+FFFD. A surrogate is written
 * as its 3-byte form (callers that take code points from untrusted input
 * reject surrogates before). */
int utf8_encode(uint32_t cp, char *out);

/* The number of characters in p[0..n): the bytes that do not continue a
 * sequence (for well-formed text, its code points; for other bytes, each
 * stray lead or invalid byte counts once). */
size_t utf8_count(const char *p, size_t n);

/* The bytes of the character at p[0..n) (n >= 1), leniently: its first byte
 * and the continuation bytes that follow it. */
size_t utf8_char_len(const char *p, size_t n);

/* The end of b[from..to) with a trailing incomplete sequence left off: to,
 * or the position of the last lead byte when fewer bytes than it announces
 * follow it (for cutting text or holding back a streamed tail). Looks at
 * most 4 bytes back. */
size_t utf8_floor(const char *b, size_t from, size_t to);

#endif
