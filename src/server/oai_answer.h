/*
 * oai_answer.h — the OpenAI generation routes (/v1/completions,
 * /v1/chat/completions) on api_serve (api.h): oai_answer.c defines
 * api_openai's callbacks (one generation: SSE chunks or one JSON answer)
 * and answers n > 1, best_of and several prompts itself (every fork
 * started at once, one answer or one interleaved stream).
 *
 * Place in the flow: server/, on the request's HTTP thread, called by
 * api_serve from routes.c.
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

#endif
