/*
 * utf8.c — the out-of-line half of utf8.h (encoding, counting, cutting).
 * See utf8.h for the contracts.
 */
#include "utf8.h"

int utf8_encode(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static int is_cont(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

size_t utf8_count(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !is_cont(p[i]);
    return k;
}

size_t utf8_char_len(const char *p, size_t n) {
    size_t l = 1;
    while (l < n && is_cont(p[l])) l++;
    return l;
}

size_t utf8_floor(const char *b, size_t from, size_t to) {
    size_t i = to;
    for (int k = 0; k < 4 && i > from; k++) {
        unsigned char c = (unsigned char)b[i - 1];
        if (!is_cont((char)c)) { /* a lead byte or ASCII at i-1 */
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            return to - (i - 1) < need ? i - 1 : to;
        }
        i--;
    }
    return to;
}
