/*
 * sched_internal.h — what the files of src/sched/ share and nobody else
 * calls: the engine's side of a request (req.c's writers). Not for use
 * outside src/sched/ (the HTTP side reads a request through req.h).
 *
 * Its functions carry the sched__ prefix (cross-file private, as tok__,
 * jinja__, grammar__ and kern__); req.h and engine.h are the public
 * contracts, with one underscore.
 *
 * Thread: the engine thread only.
 */
#ifndef KVLOOM_SCHED_INTERNAL_H
#define KVLOOM_SCHED_INTERNAL_H

#include "req.h"

/* Appends one generated token and wakes the reader. */
void sched__req_post_token(req *r, const req_token *t);
/* Records the end (once; later calls are ignored) and wakes the reader.
 * `error` is used for REQ_FINISH_ERROR and may be NULL. */
void sched__req_post_finish(req *r, req_finish why, const char *error);
/* Records how many prompt tokens came from the cache (before the first token). */
void sched__req_set_cached(req *r, int n_cached);

#endif
