/*
 * gtext.h — text helpers shared by the JSON Schema compiler (schema.c) and
 * the regular-expression compiler (regex.c): a growable string, strict
 * UTF-8 decoding, and code points written into GBNF literals and classes.
 * Not a public header: only the .c files of src/grammar and the regex fuzz target
 * include it.
 */
#ifndef KVLOOM_GTEXT_H
#define KVLOOM_GTEXT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

/* ---- a growable string -------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static inline void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        b->p = xrealloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static inline void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static inline void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}
static inline void sb_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- UTF-8 -------------------------------------------------------------- */

/* Decodes one code point of s[0..n); returns its length, or 0 when invalid. */
static inline int utf8_dec(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* Writes code point cp into a GBNF literal or class (ASCII-only text). */
static inline void gbnf_cp(sbuf *b, uint32_t cp, bool in_class) {
    if (cp == '"' && !in_class) sb_puts(b, "\\\"");
    else if (cp == '\\') sb_puts(b, "\\\\");
    else if (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-')) sb_printf(b, "\\x%02x", cp);
    else if (cp >= 0x20 && cp < 0x7f) {
        char c = (char)cp;
        sb_put(b, &c, 1);
    } else if (cp < 0x80) sb_printf(b, "\\x%02x", cp);
    else if (cp <= 0xFFFF) sb_printf(b, "\\u%04x", cp);
    else sb_printf(b, "\\U%08x", cp);
}


#endif
