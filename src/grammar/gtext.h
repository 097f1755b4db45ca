/*
 * gtext.h — text helpers shared by the JSON Schema compiler (schema.c) and
 * the regular-expression compiler (regex.c): code points written into GBNF
 * literals and classes (the growable string is base/sbuf.h, UTF-8
 * base/utf8.h).
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
#include "../base/sbuf.h"
#include "../base/utf8.h"

/* Writes code point cp into a GBNF literal or class (ASCII-only text). */
static inline void gbnf_cp(sbuf *b, uint32_t cp, bool in_class) {
    if (cp == '"' && !in_class) sbuf_puts(b, "\\\"");
    else if (cp == '\\') sbuf_puts(b, "\\\\");
    else if (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-')) sbuf_printf(b, "\\x%02x", cp);
    else if (cp >= 0x20 && cp < 0x7f) {
        char c = (char)cp;
        sbuf_put(b, &c, 1);
    } else if (cp < 0x80) sbuf_printf(b, "\\x%02x", cp);
    else if (cp <= 0xFFFF) sbuf_printf(b, "\\u%04x", cp);
    else sbuf_printf(b, "\\U%08x", cp);
}


#endif
