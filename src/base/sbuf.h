/*
 * sbuf.h — the growable byte string of the program: replies the server
 * builds, grammar text the schema and regex compilers write, rule names.
 *
 * Place in the flow: base/ (includes only base.h).
 *
 *   sbuf b = {0};              an empty buffer owns nothing
 *   sbuf_puts(&b, "root ::= ");
 *   sbuf_printf(&b, "%d", n);  b.p is "root ::= 7", b.n is 10
 *   sbuf_free(&b);             back to {0}
 *
 * Invariants: after any append, p is NUL-terminated at p[n] (so b.p reads as
 * a C string) and n < cap; the capacity at least doubles on each growth, so
 * appends are amortised O(1). Allocation failure aborts (xrealloc): the
 * buffers hold what the program writes, whose sizes are bounded by the
 * checks of the input they came from. Thread safety: a buffer belongs to one
 * thread at a time.
 */
#ifndef KVLOOM_SBUF_H
#define KVLOOM_SBUF_H

#include <stddef.h>

typedef struct sbuf {
    char *p;       /* NULL until the first append */
    size_t n, cap; /* bytes written (without the NUL); bytes allocated */
} sbuf;

/* Appends n bytes of data (which may be NULL when n is 0). */
void sbuf_put(sbuf *b, const void *data, size_t n);
/* Appends the C string s. */
void sbuf_puts(sbuf *b, const char *s);
/* Appends printf output. */
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees the bytes and empties b (reusable afterwards). */
void sbuf_free(sbuf *b);

#endif
