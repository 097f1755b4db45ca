/*
 * stop.h — stop strings over a stream of generated text.
 *
 * Place in the flow: server/, on the HTTP thread that reads a request's
 * tokens: detokenized text goes in, text safe to send to the client comes
 * out. Text that could be the beginning of a stop string is held back until
 * it either completes the stop string (generation ends; the stop string and
 * everything after it are dropped) or stops matching (it is released).
 *
 *   stops = {"\n\n"}:   feed "Hi\n"  -> release "Hi"  (holds "\n")
 *                       feed "there" -> release "\nthere"
 *                       feed "!\n\nX"-> release "!", matched: done
 *
 * Invariant: the released text never contains a stop string, and it is a
 * prefix of the full text; held text is the shortest suffix that is a proper
 * prefix of some stop string.
 */
#ifndef KVLOOM_STOP_H
#define KVLOOM_STOP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct stop_matcher stop_matcher;

/* A matcher for n stop strings (copied; empty strings are ignored). n may be 0. */
stop_matcher *stop_new(char *const *stops, int n);
void stop_free(stop_matcher *m); /* NULL is a no-op */

/* Appends n bytes of text. Sets *out / *out_n to the text that may be sent
 * now (valid until the next call on m). Returns true when a stop string has
 * been completed: *out then ends right before it and further feeds release
 * nothing. */
bool stop_feed(stop_matcher *m, const char *text, size_t n, const char **out, size_t *out_n);
/* End of generation without a match: releases everything held. */
void stop_flush(stop_matcher *m, const char **out, size_t *out_n);
bool stop_matched(const stop_matcher *m);
/* The stop string that matched (owned by m), or NULL. */
const char *stop_which(const stop_matcher *m);

#endif
