/*
 * oai_answer.h — answers a started OpenAI generation (/v1/completions,
 * /v1/chat/completions): streamed as SSE chunks when the request asked for
 * a stream, else one JSON answer; the generation is finished (gen_done:
 * counted and logged) when the answer ends, and cancelled if the client
 * leaves first.
 *
 * Place in the flow: server/, on the request's HTTP connection thread,
 * after routes.c's handle_generate started the generation (generate.h).
 */
#ifndef KVLOOM_OAI_ANSWER_H
#define KVLOOM_OAI_ANSWER_H

#include "generate.h"
#include "http.h"
#include "oai.h"
#include "routes.h"

/* What differs between the two OpenAI generation routes, in one place:
 * routes.c and oai_answer.c read these words instead of testing the kind
 * at every use. */
typedef struct oai_route {
    const char *path;         /* canonical path, for the request log   */
    const char *object;       /* "object" of a whole answer            */
    const char *chunk_object; /* "object" of an SSE chunk              */
    const char *id_prefix;    /* answer ids: "<prefix>-<hex>"          */
    const char *payload_key;  /* a chunk choice's new output           */
} oai_route;

/* The words of `kind` (a static row). */
const oai_route *oai_route_of(oai_kind kind);

/* Answers x from g (taken: freed when the answer ends). p: the request's
 * parsed fields (read here, not kept). */
void oai_answer(routes_ctx *rc, gen *g, const oai_params *p, oai_kind kind, http_exchange *x);

/* One whole answer (not streamed) from n_gens generations started together
 * (taken): `per` per prompt, in prompt order. Each prompt answers n of its
 * forks: all of them (per == n), or best_of's n of the highest cumulative
 * logprob, best first (per > n; the forks were started with logprobs);
 * choice indexes run 0 .. n x prompts - 1. usage counts each prompt once
 * (its first fork's prompt and cached tokens) and every generated token. A
 * client that leaves cancels them all; a failed one fails the answer. */
void oai_answer_many(routes_ctx *rc, gen **gs, int n_gens, int per, int n, const oai_params *p, oai_kind kind,
                     http_exchange *x);
/* The same streamed (n per prompt, no best_of): every fork's chunks carry
 * its choice index (OpenAI's n > 1 streams), interleaved as they come;
 * each choice gets its role (chat) or echo first and its finish chunk; one
 * usage chunk with stream_options.include_usage, one [DONE]. A failed fork
 * ends the stream with an error event and [DONE], the others cancelled. */
void oai_answer_many_stream(routes_ctx *rc, gen **gs, int n_gens, int n, const oai_params *p, oai_kind kind,
                            http_exchange *x);

#endif
