/*
 * sbuf.c — the growable byte string. See sbuf.h for the contract.
 */
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

void sbuf_put(sbuf *b, const void *data, size_t n) {
    size_t need;
    if (!add_ok(b->n, n, &need) || !add_ok(need, 1, &need)) PANIC("sbuf: %zu + %zu bytes overflow", b->n, n);
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sbuf_puts(sbuf *b, const char *s) { sbuf_put(b, s, strlen(s)); }

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    /* most pieces are short: format on the stack, and only a long one twice */
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof small) {
        sbuf_put(b, small, (size_t)k);
        return;
    }
    char *big = xmalloc((size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    sbuf_put(b, big, (size_t)k);
    free(big);
}

void sbuf_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
